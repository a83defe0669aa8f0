"""The pure scheduling core: snapshot in, plan out.

No I/O, no clock, no subprocess; randomness only from a ``numpy.random.Generator`` passed in.
Shared by the daemon, the simulator and the tests (see ``run_round`` in :mod:`.rounds`).
"""
