"""The one C part of acx: ``acx.drivers._cspawn`` (vfork + execve straight into a session's cgroup;
see src/acx/drivers/_cspawn.c). Optional: without a C compiler the build goes on and acx starts
commands in cgroups through a ``/bin/sh`` wrapper instead (slower, same guarantees). Everything else
about the package is in pyproject.toml."""

import sys

from setuptools import Extension, setup

ext_modules = []
if sys.platform.startswith("linux"):
    ext_modules.append(Extension("acx.drivers._cspawn", ["src/acx/drivers/_cspawn.c"], optional=True))

setup(ext_modules=ext_modules)
