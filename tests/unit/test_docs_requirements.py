# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The documentation site's tools (requirements/docs.txt) are pinned whole, and agree with the development pins.

scripts/docs-site installs the file with ``pip install --no-deps``: a package it does not list is not installed,
so every line pins one; the packages both venvs hold (ansible-core, whose ansible-doc renders the pages, jinja2,
antsibull-changelog) are pinned to the same release in both.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
PIN = re.compile(r'^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)$')


def pins(name):
    """``{package: version}`` of a requirements file; fails on a line that is neither a comment nor one pin."""
    found = {}
    with open(os.path.join(ROOT, 'requirements', name)) as handle:
        for number, line in enumerate(handle, 1):
            line = line.split('#', 1)[0].strip()
            if not line:
                continue
            match = PIN.match(line)
            assert match, 'requirements/%s:%d: %r is not one package pinned with ==' % (name, number, line)
            package = re.sub(r'[-_.]+', '-', match.group(1)).lower()
            assert package not in found, 'requirements/%s:%d: %s is listed twice' % (name, number, package)
            found[package] = match.group(2)
    return found


def test_every_docs_requirement_is_one_pin():
    assert {'antsibull-docs', 'sphinx', 'sphinx-ansible-theme', 'ansible-core'} <= set(pins('docs.txt'))


def test_docs_and_dev_pin_the_packages_they_share_alike():
    docs, dev = pins('docs.txt'), pins('dev.txt')
    differ = dict((package, (docs[package], dev[package])) for package in set(docs) & set(dev)
                  if docs[package] != dev[package])
    assert not differ, 'docs.txt and dev.txt pin these differently (docs, dev): %s' % differ
    assert 'ansible-core' in set(docs) & set(dev)
