"""The HTTP shell of the admission webhook: Flask app, gunicorn server, TLS, metrics, caches.

The decisions themselves are the pure functions of ``volcano_metronome.admission``.
"""
