"""TF_CONFIG as the tf.distribute backends read it: checked first, so a mistake gets a clear error
naming every problem instead of a gRPC failure or a hang."""
from __future__ import annotations

import json
from typing import Any, Mapping

from tfdist.cluster import ClusterConfigError, validate_tf_config


def checked_tf_config(config: str | Mapping[str, Any]) -> dict[str, Any]:
    """``config`` (JSON text or a dict) as a fresh dict; ``ClusterConfigError`` lists every problem."""
    problems = validate_tf_config(config if isinstance(config, str) else dict(config))
    if problems:
        raise ClusterConfigError(problems)
    return json.loads(config) if isinstance(config, str) else json.loads(json.dumps(dict(config)))
