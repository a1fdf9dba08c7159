"""``volcano-metronome controller [--config FILE] [--kubeconfig FILE] ...``: run the queue controller."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``controller`` (they override the settings file)."""
    parser.add_argument("--config", metavar="FILE", help="settings file (YAML, camelCase keys; docs/controller.md)")
    parser.add_argument("--kubeconfig", metavar="FILE",
                        help="kubeconfig (default: $KUBECONFIG, ~/.kube/config, else the in-cluster service account)")
    parser.add_argument("--namespace", help="namespace of the controller (and of its Lease unless configured)")
    parser.add_argument("--identity", help="leader-election identity (default: hostname_<random>)")
    parser.add_argument("--health-port", type=int, metavar="PORT", help="port of /healthz, /readyz and /metrics")
    parser.add_argument("--bind-address", metavar="ADDR", help="address the health server binds")
    parser.add_argument("--no-leader-elect", action="store_true",
                        help="act without a Lease (only ever run ONE replica like this)")
    parser.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    parser.add_argument("--exit-after-writes", type=int, metavar="N",
                        help="testing aid: SIGKILL the process after N successful API writes")


def run(args: argparse.Namespace) -> int:
    """Run until SIGTERM/SIGINT (exit 0) or until the Lease is lost (exit 1)."""
    import logging
    import re
    import signal
    import threading

    from volcano_metronome import kube
    from volcano_metronome.commands.files import read_yaml
    from volcano_metronome.controller import settings as settings_mod
    from volcano_metronome.controller.loop import ServeOptions, serve
    from volcano_metronome.core.errors import InvalidInput, MetronomeError

    logging.basicConfig(level=args.log_level,
                        format="%(asctime)s %(levelname)s %(name)s %(threadName)s: %(message)s")
    try:
        settings = settings_mod.parse(read_yaml(args.config) if args.config is not None else None)
    except InvalidInput as exc:
        raise MetronomeError(f"{args.config}: {exc}") from None
    # The flags override the file's keys and are checked as those keys are (named by the flag).
    flags = {key: value for key, value in (("namespace", args.namespace), ("healthPort", args.health_port),
                                           ("bindAddress", args.bind_address)) if value is not None}
    try:
        settings = settings_mod.parse(flags, settings)
    except InvalidInput as exc:
        flag = "--" + re.sub(r"([A-Z])", lambda m: "-" + m.group(1).lower(), exc.field)
        raise InvalidInput(flag, exc.value, exc.expected) from None
    client = kube.connect(args.kubeconfig)
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        logging.getLogger("volcano_metronome.controller").info("signal %d: stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    options = ServeOptions(identity=args.identity or "", leader_election=not args.no_leader_elect,
                           exit_after_writes=args.exit_after_writes)
    try:
        return serve(client, settings, options, stop)
    finally:
        client.close()
