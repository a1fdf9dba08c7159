"""Certificates, in one place: :mod:`.pki` makes them (CA, serving, client, service-account keys),
:mod:`.serving` decides which of the webhook's to keep and which to make again (pure, an explicit ``now``).

Where they are kept is the caller's business: ``volcano-metronome certs`` (:mod:`volcano_metronome.commands.certs`)
writes a directory or a Secret (through :mod:`volcano_metronome.kube.secrets`), and the webhook server picks
them up from disk without a restart (:mod:`webhooks.tls`).
"""
