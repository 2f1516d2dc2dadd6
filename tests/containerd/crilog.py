# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The CRI plugin's own configuration, as a started containerd logs it.

containerd 1.6's CRI plugin logs, at start, the configuration it really uses
(``Start cri plugin with config {...}``, Go's ``%+v``): what ``config dump``
shows after the plugin's own rules (the deprecated ``default_runtime`` table
becoming the runtime "default", for one). ``cri_config`` reads the last such
line of a log into dicts and lists, values as strings.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

LINE = re.compile(r'Start cri plugin with config (\{.*\})"?\s*$', re.M)


def cri_config(log):
    """The last logged CRI configuration in ``log`` (``{'PluginConfig': {...}, ...}``), or None."""
    found = LINE.findall(log or '')
    if not found:
        return None
    value, end = _value(found[-1], 0)
    return value


def runtimes(log):
    """``(runtimes, default runtime name)`` of the last logged CRI configuration."""
    config = cri_config(log)
    assert config is not None, 'no "Start cri plugin with config" line in the log:\n%s' % log[-2000:]
    containerd = config['PluginConfig']['ContainerdConfig']
    return containerd['Runtimes'], containerd['DefaultRuntimeName']


def _value(text, pos):
    if text.startswith('map[', pos):
        return _pairs(text, pos + 4, ']')
    if text.startswith('{', pos):
        return _pairs(text, pos + 1, '}')
    if text.startswith('[', pos):
        items, pos = [], pos + 1
        while text[pos] != ']':
            item, pos = _value(text, pos)
            items.append(item)
            if text[pos] == ' ':
                pos += 1
        return items, pos + 1
    end = pos
    while end < len(text) and text[end] not in ' ]}':
        end += 1
    return text[pos:end], end


def _pairs(text, pos, closer):
    found = {}
    while text[pos] != closer:
        colon = text.index(':', pos)
        key = text[pos:colon]
        found[key], pos = _value(text, colon + 1)
        if text[pos] == ' ':
            pos += 1
    return found, pos + 1
