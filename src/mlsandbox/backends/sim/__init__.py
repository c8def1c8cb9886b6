"""The ``sim`` backend: the whole declared Runtime in one process, in memory, on a virtual clock, its
jobs, serving and flows driven by a surrogate calibrated on real runs of the ``local`` backend."""
