"""Package discovery for the one non-standard part of the layout.

``components/`` and ``pipelines/`` are installed as ``kftrain_components`` and ``kftrain_pipelines``
so pipelines import their components as ordinary Python; every folder with an ``__init__.py``
under them is found here, so adding a component needs no edit to the packaging.
"""

from setuptools import find_packages, setup

RENAMED = {"components": "kftrain_components", "pipelines": "kftrain_pipelines"}

packages = find_packages(include=["kftrain", "kftrain.*"])
for folder, package in RENAMED.items():
    packages += [package + name[len(folder) :] for name in find_packages(include=[folder, f"{folder}.*"])]

setup(
    packages=packages,
    package_dir={"kftrain": "kftrain", **{package: folder for folder, package in RENAMED.items()}},
    # The compiled component.yaml / pipeline.yaml and the READMEs ship with their code; py.typed marks the
    # packages as typed (PEP 561) for the type checkers of pipeline authors.
    package_data={package: ["*.yaml", "*.md", "py.typed"] for package in packages},
)
