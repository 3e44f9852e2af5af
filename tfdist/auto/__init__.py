"""``--backend auto``: probe -> advise -> place -> plan, once, for ``tfdist launch --backend auto`` and
``tfdist advise --probe`` (:mod:`tfdist.auto.pipeline`); then the run that re-plans itself at epoch
boundaries (:mod:`tfdist.auto.adaptive`).

Layering: may import :mod:`tfdist.probe`, :mod:`tfdist.adapt`, :mod:`tfdist.advise`, :mod:`tfdist.launch`
(the hosts, the backend table, ssh options), :mod:`tfdist.plan` and :mod:`tfdist.run_channel`; only the
CLI imports it.

    from tfdist.auto import AutoRequest, decide
    decision = decide(AutoRequest(HostList.parse("h1:1,h2:1,h3:1"), ps=1, batch_size=64, model="models:build"))
"""
from tfdist.auto.pipeline import AutoRequest, Decision, MeasureError, decide

__all__ = ["AutoRequest", "Decision", "MeasureError", "decide"]
