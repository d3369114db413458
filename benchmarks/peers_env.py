"""The peers' own virtual environment: mosaicml-streaming and litdata, isolated from astream.

Theory of operation
-------------------
The peers are installed into ``.bench/peers-venv`` so that nothing they pull in can change
astream's environment. Three workarounds make them run on a CPU-only machine:

- ``torch`` is pinned with a constraints file to the CPU build the project uses; an unpinned
  resolve would replace it with a multi-gigabyte CUDA build.
- mosaicml-streaming imports ``torchvision`` at import time, and the registry's torchvision
  needs operators that the CPU torch here does not register. A stub ``torchvision`` wheel,
  built here by hand (a wheel is a zip with a dist-info folder), is installed *first*; its
  version satisfies the peers' requirement, so pip keeps it. It offers only the three names
  mosaic imports (``VisionDataset``, ``CIFAR10``, ``to_tensor``); the benchmarks use none.
- litdata's obstore downloader refuses plain-http endpoints and mosaic reads its S3 endpoint
  from ``S3_ENDPOINT_URL``; both are set by the runners (benchmarks/runners/), not here.

The venv is reused when its marker file records the same pins.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

MOSAIC = "mosaicml-streaming==0.13.0"
LITDATA = "litdata==0.2.76"
TORCH = "torch==2.13.0"
STUB_VERSION = "0.28.0"
PINS = f"{MOSAIC} {LITDATA} {TORCH} torchvision-stub=={STUB_VERSION}"

_STUB_FILES = {
    "torchvision/__init__.py": (
        '"""Stub torchvision for the benchmark peers venv only (no operators, no models)."""\n'
        f'__version__ = "{STUB_VERSION}"\n'
        "from torchvision import datasets, transforms  # noqa: E402,F401\n"
    ),
    "torchvision/datasets/__init__.py": (
        "import torch.utils.data\n\n\n"
        "class VisionDataset(torch.utils.data.Dataset):\n"
        "    def __init__(self, root=None, transforms=None, transform=None,\n"
        "                 target_transform=None):\n"
        "        self.root = root\n"
        "        self.transforms = transforms\n"
        "        self.transform = transform\n"
        "        self.target_transform = target_transform\n\n\n"
        "class CIFAR10(VisionDataset):\n"
        "    def __init__(self, *args, **kwargs):\n"
        "        raise NotImplementedError('torchvision stub: CIFAR10 is not available')\n"
    ),
    "torchvision/transforms/__init__.py": "from torchvision.transforms import functional  # noqa\n",
    "torchvision/transforms/functional.py": (
        "import numpy as np\nimport torch\n\n\n"
        "def to_tensor(pic):\n"
        "    arr = np.asarray(pic)\n"
        "    if arr.ndim == 2:\n"
        "        arr = arr[:, :, None]\n"
        "    t = torch.from_numpy(arr.copy()).permute(2, 0, 1).contiguous()\n"
        "    return t.float().div(255) if t.dtype == torch.uint8 else t\n"
    ),
}


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_stub_wheel(out_dir: Path) -> Path:
    """Write ``torchvision-STUB_VERSION-py3-none-any.whl`` into ``out_dir``; return its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    dist = f"torchvision-{STUB_VERSION}.dist-info"
    files = {k: v.encode() for k, v in _STUB_FILES.items()}
    files[f"{dist}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: torchvision\nVersion: {STUB_VERSION}\n"
        "Summary: stub for the astream benchmark peers venv\n"
    ).encode()
    files[f"{dist}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: astream-benchmarks\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n"
    )
    record = [_record_line(k, v) for k, v in files.items()] + [f"{dist}/RECORD,,"]
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = out_dir / f"torchvision-{STUB_VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def ensure_peers_venv(venv: Path, log: Callable[[str], None] = print) -> Path:
    """Create (or reuse) the peers' venv; return its python (CalledProcessError on failure)."""
    marker = venv / "astream-bench-pins.txt"
    py = venv_python(venv)
    if py.exists() and marker.exists() and marker.read_text().strip() == PINS:
        return py
    log(f"[peers] creating {venv} ({PINS})")
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    constraints = venv / "constraints.txt"
    constraints.write_text(f"{TORCH}\ntorchvision=={STUB_VERSION}\n")
    wheel = build_stub_wheel(venv / "stub")
    pip = [str(py), "-m", "pip", "install", "-q", "-c", str(constraints)]
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    subprocess.run([*pip, TORCH], check=True, env=env)
    subprocess.run([*pip, "--no-deps", str(wheel)], check=True, env=env)
    subprocess.run([*pip, MOSAIC, LITDATA, "psutil"], check=True, env=env)
    marker.write_text(PINS + "\n")
    return py


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(".bench/peers-venv")
    print(ensure_peers_venv(target))
