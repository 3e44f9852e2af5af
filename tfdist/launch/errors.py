"""The launcher's error, below every launch module (hosts, plans, ssh) so that none imports another for it."""
from __future__ import annotations

from tfdist.errors import TfdistError


class LaunchError(TfdistError, ValueError):
    """A launch request that cannot work; the message names the option and the fix."""
