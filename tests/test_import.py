import subprocess
import sys


def test_core_import_pulls_no_framework():
    code = ("import sys, fedlns_core; "
            "print(','.join(m for m in ('torch', 'flwr', 'fedml', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == ""


def test_simulator_report_reads_run_files_without_torch():
    """The report, the run files and the archive/verify reading work where torch is not even importable."""
    code = ("import sys; sys.modules['torch'] = None; "   # importing torch now raises ImportError
            "import fedlns_sim.report, fedlns_sim.runfiles, fedlns_sim.config; "
            "print(','.join(m for m in ('transformers', 'fedlns_sim.run', 'fedlns_sim.data') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""
