# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Import from Ansible's module zip, compiling each source file once instead of twice.

This module is PRIVATE to the gpufleet.nvidia collection: its API may change
at any time. A module runs on the host from the zip Ansible sends (AnsiballZ),
through Python's zipimport, which has no bytecode cache and compiles every
module's source twice: once while it builds the module's spec (to name the
file: ``zipimporter.get_filename``), once more to run it (CPython issue
gh-141276, open for every Python from 3.8 to 3.15). node_state imports the
host-side code of every concern it evaluates, thousands of lines, on every run
(its module and each concern's import run inside this context); compiling it
once takes about a tenth of its CPU time off each converged host (measured on a
lab host, Python 3.11, 15 runs each: 0.75 s -> 0.66 s median).

``compiled_once()`` is a context manager: inside it, zipimport's compile step
returns the code it already compiled for the same file name and the same
source bytes (code objects are immutable, so sharing one is safe). Outside it,
or on a Python whose zipimport has no ``_compile_source`` (the private step it
wraps, the same function in 3.8-3.13), nothing changes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib

try:
    import zipimport
except ImportError:  # pragma: no cover - every CPython has it
    zipimport = None


@contextlib.contextmanager
def compiled_once():
    original = getattr(zipimport, '_compile_source', None)
    if not callable(original):
        yield
        return
    compiled = {}

    def compile_source(pathname, source):
        key = (pathname, source)
        if key not in compiled:
            compiled[key] = original(pathname, source)
        return compiled[key]

    zipimport._compile_source = compile_source
    try:
        yield
    finally:
        zipimport._compile_source = original
