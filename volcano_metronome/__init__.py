"""volcano-metronome: node sets and TDM phase offsets for distributed-training gangs on Kubernetes."""

__version__ = "0.1.0"
