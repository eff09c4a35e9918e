"""The native door (exporter/native/, docs/architecture.md): each kernel in C beside its pure-Python twin.

Everything else about the package is in pyproject.toml. The extensions are optional: where they cannot be
compiled the package still installs and runs the twins, only slower, and the exporter logs which.
"""

from setuptools import Extension, setup

# No fused multiply-add where Python rounds twice: the kernels and their twins must agree bit for bit.
COMPILE_ARGS = ["-ffp-contract=off"]
KERNELS = ("scan", "step_fields", "detectors")

HEADERS = [f"exporter/native/{header}.h" for header in ("decimal", "blocks", "doubles")]

setup(ext_modules=[
    Extension(f"exporter.native._{kernel}", [f"exporter/native/{kernel}.c"], optional=True, depends=HEADERS,
              extra_compile_args=COMPILE_ARGS)
    for kernel in KERNELS
])
