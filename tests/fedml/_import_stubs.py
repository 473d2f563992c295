"""Stand-ins for the two modules that ``import fedml`` needs but this environment cannot hold.

FedML 0.9.6 imports ``torchvision`` and ``wandb`` at module level in many places
(data loaders, attack code, trackers), even when a run uses neither:

- ``torchvision`` from the package index is built against the CUDA torch; beside the
  CPU torch its C ops fail to register (``RuntimeError: operator torchvision::nms does
  not exist``), so it is not installed in ``.venv-fedml``.
- ``wandb==0.13.2`` (FedML's pin) uses ``np.float_`` and fails to import on numpy 2.

The FedLNS adapter uses neither. :func:`install` registers an import hook that
answers *only* for those two top-level names, and *only* when the real package is
not importable. Every attribute of a stand-in module is a placeholder class: code
may import it, subclass it or reference it, but calling it raises ``ImportError``
naming the missing package, so nothing silently pretends to work.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

STUBBED = ("torchvision", "wandb")


class _PlaceholderMeta(type):
    """Metaclass: attribute access yields more placeholders; calling one raises."""

    def __getattr__(cls, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _placeholder(f"{cls.__qualname__}.{name}", cls._missing)

    def __call__(cls, *args, **kwargs):
        raise ImportError(
            f"{cls.__qualname__} is a stand-in: {cls._missing!r} is not installed in this "
            "environment (see docs/fedml.md)"
        )


def _placeholder(qualname: str, missing: str) -> type:
    return _PlaceholderMeta(qualname.rsplit(".", 1)[-1], (), {"__qualname__": qualname, "_missing": missing})


class _StubModule(types.ModuleType):
    """A module whose every public attribute is a placeholder class."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _placeholder(f"{self.__name__}.{name}", self.__name__.split(".")[0])


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``torchvision``/``wandb`` and their submodules; placed last on ``sys.meta_path``."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] not in self.names:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []  # a package, so that submodule imports reach this finder
        return module

    def exec_module(self, module):
        return None


def install() -> tuple[str, ...]:
    """Stand in for the packages of :data:`STUBBED` that are not importable; return their names.

    Idempotent. Appended at the end of ``sys.meta_path`` so that a real installation
    always wins.
    """
    if any(isinstance(finder, _StubFinder) for finder in sys.meta_path):
        return next(f.names for f in sys.meta_path if isinstance(f, _StubFinder))
    missing = tuple(name for name in STUBBED if importlib.util.find_spec(name) is None)
    if missing:
        sys.meta_path.append(_StubFinder(missing))
    return missing
