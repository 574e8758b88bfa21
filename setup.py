"""Maps the fixed top-level layout onto the ``sonic_hep`` namespace.

The repository keeps the layout physicists expect (``framework/ modules/ workflows/ configs/ data/``),
but installing packages called ``framework`` or ``data`` into site-packages would collide with other
software, so every room is installed as ``sonic_hep.<room>``. Sub-packages are discovered here, so a
new folder with an ``__init__.py`` is packaged without editing pyproject.toml.
"""

from setuptools import find_packages, setup

ROOMS = ("framework", "modules", "workflows", "data", "configs")

package_dir = {f"sonic_hep.{room}": room for room in ROOMS}
packages = []
for room in ROOMS:
    packages.append(f"sonic_hep.{room}")
    packages += [f"sonic_hep.{room}.{sub}" for sub in find_packages(room)]

setup(packages=packages, package_dir=package_dir)
