"""Start-up paths, each checked in a fresh interpreter (``sys.modules`` and module globals are
per process): a local dataset never imports a cloud SDK, and a forked DataLoader worker reuses
the S3 models its parent parsed instead of parsing them again."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from astream.writer.mds import MDSWriter

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_local_dataset_imports_no_cloud_sdk(tmp_path: Path) -> None:
    with MDSWriter(out=str(tmp_path), columns={"x": "int64"}, size_limit=1 << 10) as w:
        for i in range(300):
            w.write({"x": i})
    p = _run(
        f"""
        import sys
        from astream.torch.dataset import StreamingDataset
        ds = StreamingDataset(local={str(tmp_path)!r}, shuffle=True, batch_size=8)
        assert sorted(int(ds[i]["x"]) for i in range(len(ds))) == list(range(300))
        sdk = sorted(m for m in sys.modules if m.split(".")[0] in
                     ("aiobotocore", "botocore", "boto3", "aiohttp", "google", "azure"))
        print("SDK", sdk)
        """
    )
    assert p.returncode == 0, p.stderr
    assert "SDK []" in p.stdout, p.stdout


def test_forked_child_reuses_parsed_s3_models() -> None:
    # the parent parses botocore's S3 models once; a forked child (a DataLoader worker) must
    # get the very same loader without calling _load_models again
    p = _run(
        """
        import asyncio, os
        import astream.storage.s3sdk as s3m
        parent = asyncio.run(s3m._warm_loader())
        assert parent.load_service_model("s3", "service-2")["metadata"]["protocol"] == "rest-xml"
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            def refuse():
                raise AssertionError("models parsed again in the child")
            s3m._load_models = refuse
            try:
                ok = asyncio.run(s3m._warm_loader()) is parent
            except AssertionError:
                ok = False
            os.write(w, b"1" if ok else b"0")
            os._exit(0)
        os.waitpid(pid, 0)
        print("CHILD", os.read(r, 1).decode())
        """
    )
    assert p.returncode == 0, p.stderr
    assert "CHILD 1" in p.stdout, (p.stdout, p.stderr)
