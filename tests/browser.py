"""Headless Chromium for tests that check a page as a person would see it (Debian's ``chromium``)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

#: Installed by scripts/setup.sh (Debian package ``chromium``).
CHROMIUM = "chromium"


def chromium() -> str:
    """The chromium binary, or a failure saying how to install it."""
    found = shutil.which(CHROMIUM)
    if found is None:
        raise RuntimeError("chromium is not installed; run `make setup` (apt-get install chromium)")
    return found


def screenshot(url: str, out: Path, size: tuple[int, int] = (1400, 2000), wait_ms: int = 0,
               timeout: float = 120) -> Path:
    """Render ``url`` in headless Chromium into the PNG ``out``; ``wait_ms`` of virtual time lets
    scripts run first. Chromium and every process it started are gone when this returns."""
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        command = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                   f"--user-data-dir={profile}", f"--screenshot={out}", f"--window-size={size[0]},{size[1]}"]
        if wait_ms:
            command.append(f"--virtual-time-budget={wait_ms}")
        process = subprocess.Popen([*command, url], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            output, _ = process.communicate(timeout=timeout)
        finally:
            try:
                os.killpg(process.pid, signal.SIGKILL)  # the renderer and helpers of this session only
            except ProcessLookupError:
                pass
            process.wait()
    if process.returncode != 0 or not out.is_file():
        raise RuntimeError(f"chromium exited {process.returncode} without {out}: {output.decode(errors='replace')[-2000:]}")
    return out


def ink(png: Path, box: tuple[int, int, int, int] | None = None) -> float:
    """The share of pixels that are not (near) white, in ``box`` (left, top, right, bottom) or the
    whole image: 0.0 for a blank page."""
    from PIL import Image

    with Image.open(png) as image:
        grey = (image.crop(box) if box else image).convert("L")
        histogram = grey.histogram()
    return sum(histogram[:245]) / sum(histogram)


def pixels_of(png: Path, colour: tuple[int, int, int], box: tuple[int, int, int, int] | None = None,
              distance: int = 10) -> int:
    """How many pixels (in ``box``) are within ``distance`` of the RGB ``colour``."""
    from PIL import Image

    with Image.open(png) as image:
        rgb = (image.crop(box) if box else image).convert("RGB")
        return sum(1 for pixel in rgb.get_flattened_data()
                   if sum((a - b) ** 2 for a, b in zip(pixel, colour)) <= distance * distance)
