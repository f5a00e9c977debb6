"""The compiled page walker, npu_trace/ftrace/_walk.c; everything else is declared in pyproject.toml.

optional=True: where no compiler is, the install goes on without the extension and npu_trace.ftrace.walk
runs its pure-Python walk (the same results, slower); `npu-trace doctor` says which one runs. (Kept here:
declaring extensions in pyproject.toml needs setuptools 74, newer than the distributions' own.)
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("npu_trace.ftrace._walk", ["npu_trace/ftrace/_walk.c"], optional=True)])
