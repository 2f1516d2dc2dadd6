# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The CRI plugin's own configuration, as a started containerd logs it.

When its CRI plugin starts, containerd logs the configuration the plugin really
uses: what ``config dump`` shows after the plugin's own rules (1.x: the
deprecated ``default_runtime`` table becoming the runtime "default"; 2.x:
keys it ignores left out). The line differs by version (measured):

* 1.6 and 1.7: ``msg="Start cri plugin with config {...}"``, Go's ``%+v``
  (field names, values unquoted);
* 2.0 and later: ``msg="starting cri plugin" config="{...}"``, JSON with the
  Go struct's JSON names (``runtimeType``, ``options``,
  ``privileged_without_host_devices``).

``runtimes`` reads the last such line into one shape for both: per runtime
``Type``, ``Options`` (values as strings, zero values left out: 2.x lists
every option of runc's struct, 1.x only those set), and the other fields
under their 1.x names; the default runtime's name beside it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

LINE = re.compile(r'Start cri plugin with config (\{.*\})"?\s*$', re.M)
JSON_LINE = re.compile(r'msg="starting cri plugin" config="((?:[^"\\]|\\.)*)"')
# 2.x JSON names -> the 1.x field names the tests use.
NAMES = {'runtimeType': 'Type', 'options': 'Options', 'privileged_without_host_devices': 'PrivilegedWithoutHostDevices',
         'privileged_without_host_devices_all_devices_allowed': 'PrivilegedWithoutHostDevicesAllDevicesAllowed',
         'runtimePath': 'Path', 'baseRuntimeSpec': 'BaseRuntimeSpec', 'snapshotter': 'Snapshotter',
         'sandboxer': 'Sandboxer', 'cniConfDir': 'NetworkPluginConfDir', 'cniMaxConfNum': 'NetworkPluginMaxConfNum'}


def cri_config(log):
    """The last logged CRI configuration of a 1.x containerd in ``log`` (``{'PluginConfig': {...}}``), or None."""
    found = LINE.findall(log or '')
    if not found:
        return None
    value, end = _value(found[-1], 0)
    return value


def runtimes(log):
    """``(runtimes, default runtime name)`` of the last CRI configuration logged, from either format."""
    log = log or ''
    old = list(LINE.finditer(log))
    new = list(JSON_LINE.finditer(log))
    assert old or new, 'no "Start cri plugin with config" or "starting cri plugin" line in the log:\n%s' % log[-2000:]
    if new and (not old or new[-1].start() > old[-1].start()):
        config = json.loads(re.sub(r'\\(.)', r'\1', new[-1].group(1)))['containerd']
        found = dict((name, _runtime(dict((NAMES.get(key, key), value) for key, value in runtime.items())))
                     for name, runtime in (config.get('runtimes') or {}).items())
        return found, config['defaultRuntimeName']
    containerd = cri_config(log)['PluginConfig']['ContainerdConfig']
    return dict((name, _runtime(runtime)) for name, runtime in containerd['Runtimes'].items()), \
        containerd['DefaultRuntimeName']


def _runtime(runtime):
    options = runtime.get('Options') or {}
    runtime = dict((key, _text(value)) for key, value in runtime.items() if key != 'Options')
    runtime['Options'] = dict((key, _text(value)) for key, value in (options.items() if options else ())
                              if _text(value) not in ('', '0', 'false', [], {}))
    return runtime


def _text(value):
    """A logged value as 1.x prints it: booleans and numbers as text, JSON null as an empty list."""
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if isinstance(value, (int, float)):
        return str(value)
    if value is None:
        return []
    return value


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
