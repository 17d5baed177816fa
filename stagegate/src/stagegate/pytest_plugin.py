"""stagegate's pytest plugin, where pytest and the GPU host's script load it from
(``-p stagegate.pytest_plugin``, the ``pytest11`` entry point): its hooks are in
:mod:`stagegate.record.pytest_plugin`."""

from stagegate.record.pytest_plugin import (
    pytest_addoption,
    pytest_configure,
    pytest_load_initial_conftests,
)

__all__ = ["pytest_addoption", "pytest_configure", "pytest_load_initial_conftests"]
