import subprocess
import sys


def test_core_import_pulls_no_framework():
    code = ("import sys, fedlns_core; "
            "print(','.join(m for m in ('torch', 'flwr', 'fedml', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == ""
