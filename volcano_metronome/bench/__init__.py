"""Benchmarks: ``python -m volcano_metronome.bench {decide,webhook,controller} ... --json``.

Each prints its figures as JSON so runs can be compared; none is a timed test.
"""
