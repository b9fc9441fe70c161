"""Run a kafkajs scenario (tests/js/kafkajs_run.js) on the machine's Node and return its
JSON result. kafkajs is installed from tests/js/package-lock.json by ``make test``."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

JS_DIR = Path(__file__).resolve().parents[1] / "js"


def run_kafkajs(spec: dict, timeout: float = 60) -> dict:
    """The scenario's result; AssertionError with kafkajs' stderr when it fails."""
    node = shutil.which("node")
    assert node, "node is not installed (kafkajs tests need Node 18+)"
    assert (JS_DIR / "node_modules" / "kafkajs").is_dir(), \
        "kafkajs is not installed: run `npm ci --prefix tests/js` (make test does)"
    out = subprocess.run([node, str(JS_DIR / "kafkajs_run.js"), json.dumps(spec)], capture_output=True,
                         text=True, timeout=timeout)
    assert out.returncode == 0, f"kafkajs {spec['action']} failed:\n{out.stderr[-4000:]}"
    return json.loads(out.stdout.strip().splitlines()[-1])
