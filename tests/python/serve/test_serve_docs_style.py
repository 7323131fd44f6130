"""Scripts written as Ray Serve's docs write them (`tests/python/serve/docs_scripts/`), run
unchanged but for `import oxray as ray`, each in a fresh interpreter: on the docs' default HTTP
address (127.0.0.1:8000), so they are skipped when something else holds that port."""

import os
import socket
import subprocess
import sys

import pytest

pytest.importorskip("requests")
pytest.importorskip("fastapi")
pytestmark = pytest.mark.timeout(300)
SCRIPTS = os.path.join(os.path.dirname(__file__), "docs_scripts")


def port_8000_free() -> bool:
    with socket.socket() as s:
        # As the proxy binds: connections of an earlier script left in TIME_WAIT do not hold the port.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", 8000))
        except OSError:
            return False
    return True


@pytest.mark.parametrize("script", ["model_composition.py", "fastapi_app.py"])
def test_a_docs_style_serve_script_runs(script, tmp_path):
    if not port_8000_free():
        pytest.skip("127.0.0.1:8000 is taken on this machine")
    env = {**os.environ, "OXRAY_TEMP_DIR": str(tmp_path), "OXRAY_TORCH_TEMPLATE_AT_INIT": "0"}
    env.pop("OXRAY_ADDRESS", None)
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(
        [sys.executable, os.path.join(SCRIPTS, script)], env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, f"{script}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert "OK" in done.stdout
