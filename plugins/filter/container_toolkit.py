# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The container_toolkit role's apt key and source texts, rendered by the same code the evaluation compares with."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.nvidia.plugins.module_utils.toolkit import rules


def _checked(url, suite, components, key):
    request = {'state': 'present', 'version': '0', 'packages': list(rules.PACKAGES), 'repo_url': url,
               'repo_suite': suite, 'repo_components': list(components or []), 'repo_key': key}
    try:
        rules.check_request(request)
    except rules.ToolkitError as exc:
        raise AnsibleFilterError(str(exc))
    return request


def container_toolkit_source(url, suite='/', components=None):
    request = _checked(url, suite, components, rules.KEY_BEGIN + rules.KEY_END)
    return rules.render_source(request['repo_url'], request['repo_suite'], request['repo_components'])


def container_toolkit_key(key):
    _checked('file:/', '/', [], key)
    return rules.render_key(key)


class FilterModule(object):
    def filters(self):
        return {'container_toolkit_source': container_toolkit_source, 'container_toolkit_key': container_toolkit_key}
