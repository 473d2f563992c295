"""FedML adapter tests: they run only in the separate FedML environment.

FedML 0.9.6 cannot share an environment with flwr (see docs/fedml.md), so the main
test run skips this whole directory; ``bash scripts/test_fedml.sh`` builds
``.venv-fedml`` and runs it there.
"""

import importlib.util
import os
import tempfile
import warnings

import pytest

# origin is None for a namespace package: this very directory, tests/fedml, is one when
# tests/ is on sys.path, and must not pass for the real FedML.
_FEDML_SPEC = importlib.util.find_spec("fedml")
if _FEDML_SPEC is None or _FEDML_SPEC.origin is None:
    pytest.skip("FedML is not installed here: these tests run in their own environment, "
                "via `bash scripts/test_fedml.sh` (see docs/fedml.md)", allow_module_level=True)

# Importing fedml creates ~/.fedml: point HOME at a directory of this run (removed at the
# end), whoever started pytest. scripts/test_fedml.sh redirects HOME as well.
_HOME = tempfile.TemporaryDirectory(prefix="fedlns-fedml-home-")
os.environ["HOME"] = _HOME.name

from _import_stubs import install as _install_import_stubs  # noqa: E402

STUBBED = _install_import_stubs()  # torchvision and wandb, only where not importable

with warnings.catch_warnings():
    # FedML 0.9.6's own import-time deprecations (pkg_resources, SQLAlchemy 1.x and
    # pydantic 1.x styles) say nothing about this adapter; keep the test summary for ours.
    warnings.simplefilter("ignore", DeprecationWarning)
    warnings.simplefilter("ignore", UserWarning)
    import fedml  # noqa: E402,F401  (after the stand-ins, which it needs)


def pytest_unconfigure(config):
    _HOME.cleanup()
