"""Which packages anyshape installs, found rather than listed.

The source folders are laid out by role (``python/anyshape``, ``dialects``,
``passes``, ``tools``), not as one import tree, so setuptools' own discovery
cannot map them into ``anyshape.*``. Each root is mapped here once, and every
folder with an ``__init__.py`` under it is a package: a new subpackage needs
no edit of this file or of ``pyproject.toml``. A folder without one
(``tools/dev``: the scripts this repository runs on itself) is not installed.
The project's metadata is in ``pyproject.toml``.
"""

from setuptools import find_packages, setup

ROOTS = {
    "anyshape": "python/anyshape",
    "anyshape.dialects": "dialects",
    "anyshape.passes": "passes",
    "anyshape.tools": "tools",
}


def packages() -> list[str]:
    found = []
    for package, folder in ROOTS.items():
        found.append(package)
        found += [f"{package}.{sub}" for sub in find_packages(folder)]
    return sorted(found)


setup(packages=packages(), package_dir=ROOTS)
