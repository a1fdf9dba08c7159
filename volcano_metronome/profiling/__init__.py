"""Profiles measured from traffic: byte-counter traces (``trace``) and the pure fitter (``fit``).

No I/O, no clock: the sampler that writes traces is :mod:`volcano_metronome.sampler`.
"""
