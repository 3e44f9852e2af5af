"""Packaging for tfdist. ``callbacks/`` at the top of the repo installs as ``tfdist.callbacks``."""
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).parent
version: dict = {}
exec((HERE / "tfdist" / "version.py").read_text(), version)

setup(
    name="tfdist",
    version=version["__version__"],
    description="Distributed training for Keras models (tf-keras and Keras 3): Horovod ring-allreduce and "
                "tf.distribute ParameterServerStrategy behind one API.",
    long_description=(HERE / "README.md").read_text() if (HERE / "README.md").exists() else "",
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10,<3.13",
    packages=[
        "tfdist",
        "tfdist.adapt",
        "tfdist.cli",
        "tfdist.cluster",
        "tfdist.datasets",
        "tfdist.environments",
        "tfdist.export",
        "tfdist.horovod",
        "tfdist.advise",
        "tfdist.auto",
        "tfdist.launch",
        "tfdist.probe",
        "tfdist.report",
        "tfdist.runtime",
        "tfdist.strategies",
        "tfdist.testing",
        "tfdist.callbacks",
    ],
    package_dir={"tfdist.callbacks": "callbacks"},
    package_data={"tfdist.launch": ["bind_shim.c"], "tfdist.datasets": ["digits.npz"]},
    install_requires=[
        "tensorflow~=2.21.0",
        "tf-keras~=2.21.0",
        "tensorboard~=2.21.0",
        "click>=8",
        "PyYAML>=6",
        "matplotlib>=3.8",  # `tfdist report` draws with it
    ],
    extras_require={
        # Horovod is built from source by scripts/setup.sh (see README); this extra pins it.
        "horovod": ["horovod==0.28.1"],
        "test": ["pytest>=8", "pytest-xdist>=3.8", "hypothesis>=6.100", "ruff>=0.17", "import-linter>=2.17",
                 "kubernetes-validate>=1.30"],  # ruff, import-linter: `make lint`; kubernetes-validate: manifests
        "gpu": ["tensorflow[and-cuda]~=2.21.0"],
    },
    entry_points={"console_scripts": ["tfdist=tfdist.cli.main:main"]},
    classifiers=[
        "Programming Language :: Python :: 3.11",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
        "License :: OSI Approved :: Apache Software License",
    ],
)
