"""The runtime layer: what both the strategies and the callbacks need while a job trains.

* :mod:`tfdist.runtime.state`: the strategy ``make_strategy`` built last, the one source of who is
  chief and how many replicas step together, which callbacks ask instead of re-deriving it;
* :mod:`tfdist.runtime.allreduce`: the collectives on Horovod's ops (the gradient allreduce of both
  Kerases, the variable broadcast).

It sits below ``tfdist.strategies`` and ``tfdist.callbacks`` (both import it) and imports only the
ground modules: :mod:`tfdist.errors`, :mod:`tfdist.upstream`, :mod:`tfdist.keras_compat` and
:mod:`tfdist.keras_flavour`, never a strategy or a callback. Importing it does not import TensorFlow.
"""
