#!/usr/bin/env python3
"""The `versions` test layer: gpufleet.nvidia on every ansible-core release it supports.

For each release in requirements/ansible-core.txt (the floor first, the newest last):

- a venv of its own under .cache/ansible-versions/VERSION (Python 3.12, the release and the unit tests'
  pins from requirements/dev.txt), rebuilt only when those pins change;
- ``install``: that release's ansible-galaxy builds the tarball and installs it into an empty path, and its
  ansible-doc lists every module from that copy alone;
- ``sanity``: ansible-test sanity of that release on the installed copy, less the style-only tests (STYLE_ONLY,
  which the newest release's `sanity` layer runs);
- ``units``: the unit tests on that release;
- ``lab``: on one lab fleet (a host per init system), the real playbooks/drift.yml, as shipped, in each of
  the evaluations a fleet runs (everything; the persistence daemon stopped for maintenance; the container
  engines alone) and playbooks/site.yml with gpu_node_drift_only, from the installed copy; every release's
  drift report must be the newest's, row for row;
- ``converge``: on the same lab, with the floor, the demo's converge from the installed copy: playbooks/site.yml
  on the fleet (NVIDIA's toolkit installed from the lab's repository, the runtime registered and verified with
  containers that see their GPUs), then again, which must change nothing and find every host converged in one
  round trip. (The molecule ``site`` scenario with the floor did this with more checks, at four times the cost;
  the newest runs every scenario in the ``molecule`` layer.)

The newest release is requirements/dev.txt's: its sanity, units and every molecule scenario are the
`sanity`, `units` and `molecule` layers, so here it runs ``install`` and ``lab`` only.

Usage: tests/versions/run.py [--only VERSION[,VERSION]] [--steps install,sanity,units,lab,converge]
Prints a table of release x step, and ends with "versions: N passed, N failed".
"""

import argparse
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.path.join(ROOT, '.cache', 'ansible-versions')
LAB = [sys.executable, os.path.join(ROOT, 'tests', 'lab', 'lab')]
LAB_KINDS = 'systemd,sysvinit,upstart,upstart06'
STEPS = ('install', 'sanity', 'units', 'lab', 'converge')
UNIT_PINS = ('pytest', 'pytest-xdist', 'hypothesis', 'nvidia-ml-py')
LOAD_IMAGE = '/usr/lib/gpufleet-lab/load-image'  # the lab's busybox image, for the runtime's verification
# The evaluations drift.yml runs in, as extra vars: each sends node_state a different set of concerns.
DRIFT_RUNS = {
    'everything': [],
    'daemon-stopped': ['-e', 'persistenced_state=stopped'],
    'engines-only': ['-e', 'gpu_node_persistenced=false', '-e', 'gpu_node_gpu_persistence=false',
                     '-e', 'gpu_node_device_links=false'],
}


def log(msg):
    print('[versions] %s' % msg, flush=True)


def pins(path):
    """name -> 'name==version' of a requirements file (comments and blank lines skipped)."""
    found = {}
    with open(os.path.join(ROOT, path)) as handle:
        for line in handle:
            line = line.split('#', 1)[0].strip()
            if '==' in line:
                found[line.split('==', 1)[0].strip().lower()] = line
    return found


def releases():
    """The supported releases, floor first: the versions of requirements/ansible-core.txt, in file order."""
    found = []
    with open(os.path.join(ROOT, 'requirements', 'ansible-core.txt')) as handle:
        for line in handle:
            line = line.split('#', 1)[0].strip()
            if line:
                name, version = line.split('==', 1)
                assert name.strip() == 'ansible-core', line
                found.append(version.strip())
    return found


def python312():
    configured = os.environ.get('GPUFLEET_PYTHON312')
    candidates = ([configured] if configured else []) + sorted(
        glob.glob(os.path.expanduser('~/.pyenv/versions/3.12*/bin/python3.12'))) + [
        '/usr/bin/python3.12', '/usr/local/bin/python3.12']
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise SystemExit('no Python 3.12 found (pyenv 3.12.x or python3.12); set GPUFLEET_PYTHON312')


def venv(version):
    """The release's venv (bin directory), made or refreshed when its pins changed."""
    dev = pins('requirements/dev.txt')
    wanted = ['ansible-core==%s' % version] + [dev[name] for name in UNIT_PINS]
    path = os.path.join(CACHE, version)
    stamp = os.path.join(path, '.gpufleet-pins')
    digest = hashlib.sha256('\n'.join(wanted).encode()).hexdigest()
    # a venv moved here with a copied .cache keeps its scripts' first line (#!<where it was made>/bin/python): remade
    made_here = (_read(os.path.join(path, 'bin', 'ansible-playbook')) or '').split('\n', 1)[0] == (
        '#!' + os.path.join(path, 'bin', 'python'))
    if not os.path.exists(os.path.join(path, 'bin', 'python')) or _read(stamp) != digest or not made_here:
        log('making the venv of ansible-core %s (%s)' % (version, ' '.join(wanted[1:])))
        shutil.rmtree(path, ignore_errors=True)
        subprocess.run([python312(), '-m', 'venv', path], check=True)
        subprocess.run([os.path.join(path, 'bin', 'python'), '-m', 'pip', 'install', '-q',
                        '--disable-pip-version-check'] + wanted, check=True)
        with open(stamp, 'w') as handle:
            handle.write(digest)
    subprocess.run(['bash', os.path.join(ROOT, 'scripts', 'ansible-test-pip'), os.path.join(path, 'bin', 'python')],
                   check=True)
    return os.path.join(path, 'bin')


def _read(path):
    try:
        with open(path) as handle:
            return handle.read().strip()
    except (IOError, OSError):
        return None


class Release(object):
    """One ansible-core release: its bin directory and the collection installed from its own tarball."""

    def __init__(self, version, bindir, work):
        self.version = version
        self.bindir = bindir
        self.work = os.path.join(work, version)
        self.collections = os.path.join(self.work, 'collections')
        self.tree = os.path.join(self.collections, 'ansible_collections', 'gpufleet', 'nvidia')

    def env(self, collections=None, **extra):
        env = dict(os.environ)
        env.pop('PYTHONPATH', None)
        env.update(PATH=self.bindir + os.pathsep + env.get('PATH', ''),
                   ANSIBLE_COLLECTIONS_PATH=collections or self.collections,
                   ANSIBLE_PIPELINING='true', ANSIBLE_FORCE_COLOR='false', ANSIBLE_NOCOLOR='true',
                   ANSIBLE_HOST_KEY_CHECKING='true', ANSIBLE_PYTHON_INTERPRETER='/usr/bin/python3',
                   ANSIBLE_FORKS='16')
        env.update(extra)
        return env

    def run(self, argv, cwd=None, env=None, **kwargs):
        """Run a command of this release, its output to the layer's output; True when it exits 0."""
        return subprocess.run(argv, cwd=cwd or self.work, env=env or self.env(), **kwargs).returncode == 0


def step_install(release):
    os.makedirs(release.collections, exist_ok=True)
    env = release.env()
    if not release.run(['ansible-galaxy', 'collection', 'build', '--force', '--output-path', release.work, ROOT],
                       env=env, stdout=subprocess.DEVNULL):
        return False
    [tarball] = glob.glob(os.path.join(release.work, 'gpufleet-nvidia-*.tar.gz'))
    if not release.run(['ansible-galaxy', 'collection', 'install', '--offline', '--force', '-p', release.collections,
                        tarball], env=env, stdout=subprocess.DEVNULL):
        return False
    listed = subprocess.run(['ansible-doc', '-t', 'module', '-l', 'gpufleet.nvidia'], cwd=release.work, env=env,
                            capture_output=True, text=True)
    modules = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, 'plugins', 'modules', '*.py')))
    missing = [m for m in modules if 'gpufleet.nvidia.%s ' % m not in listed.stdout]
    if listed.returncode != 0 or missing:
        print(listed.stdout + listed.stderr)
        log('ansible-doc of %s lists no %s from the installed copy' % (release.version, ', '.join(missing)))
        return False
    log('%s: built, installed, ansible-doc lists all %d modules' % (release.version, len(modules)))
    return True


# Style checks whose verdict is about our code, not about the release: the newest release's `sanity` layer
# runs them (each costs a venv of its own per release, pylint a minute of CPU besides). Every check whose
# verdict depends on the release itself (validate-modules' schema and argument specs, ansible-doc, import,
# runtime-metadata, action-plugin-docs, compile, ...) runs on every release.
STYLE_ONLY = ('pylint', 'pep8', 'yamllint', 'changelog')


def step_sanity(release):
    # ansible-test wants the collection at .../ansible_collections/NS/NAME, as a git tree to list its files.
    # Its own output (tests/output) is no part of the tree: the tarball has no .gitignore to say so.
    subprocess.run('git init -q && echo /tests/output/ > .git/info/exclude && git add -A && '
                   'git -c user.name=t -c user.email=t@t commit -qm tree',
                   shell=True, cwd=release.tree, check=True, stdout=subprocess.DEVNULL)
    skip = [arg for name in STYLE_ONLY for arg in ('--skip-test', name)]
    return release.run(['ansible-test', 'sanity', '--venv', '--python', '3.12', '--color', 'no'] + skip, cwd=release.tree)


def step_units(release):
    env = release.env(collections=os.path.join(ROOT, '.build', 'collections'),
                      PYTHONPATH=os.path.join(ROOT, '.build', 'collections'), PYTHONDONTWRITEBYTECODE='1')
    return release.run(['python', '-m', 'pytest', '-q', '-p', 'no:cacheprovider', '-n', '2', 'tests/unit'],
                       cwd=ROOT, env=env)


def drift_rows(path):
    with open(path) as handle:
        report = json.load(handle)
    return [dict((key, row[key]) for key in ('host', 'status', 'init', 'daemon', 'gpus_off', 'engines_off',
                                              'drifted', 'errors')) for row in report['hosts']]


def step_lab(release, inventory, reports):
    """drift.yml in each evaluation and site.yml with gpu_node_drift_only, on the lab, from the installed copy."""
    ok = True
    for name, extra in sorted(DRIFT_RUNS.items()):
        report = os.path.join(release.work, 'drift-%s.json' % name)
        argv = ['ansible-playbook', '-i', inventory, '-e', 'gpufleet_drift_report=%s' % report] + extra + [
            os.path.join(release.tree, 'playbooks', 'drift.yml')]
        out = subprocess.run(argv, cwd=release.work, env=release.env(), capture_output=True, text=True)
        if out.returncode != 0 or not os.path.exists(report):
            print(out.stdout[-6000:] + out.stderr[-3000:])
            log('%s: drift.yml (%s) exited %d' % (release.version, name, out.returncode))
            ok = False
            continue
        rows = drift_rows(report)
        reports.setdefault(name, {})[release.version] = rows
        log('%s: drift.yml (%s): %s' % (release.version, name, ', '.join(
            '%s %s%s' % (r['host'], r['status'], ''.join(' (%s: %.60s...)' % item for item in sorted(r['errors'].items())))
            for r in rows)))
    out = subprocess.run(['ansible-playbook', '-i', inventory, '-e', 'gpu_node_drift_only=true',
                          os.path.join(release.tree, 'playbooks', 'site.yml')],
                         cwd=release.work, env=release.env(), capture_output=True, text=True)
    recap = re.findall(r'^(\S+)\s+: ok=\d+\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)', out.stdout, re.M)
    if out.returncode != 0 or not recap or any(changed != '0' or unreach != '0' or failed != '0'
                                               for _, changed, unreach, failed in recap):
        print(out.stdout[-6000:] + out.stderr[-3000:])
        log('%s: site.yml with gpu_node_drift_only exited %d' % (release.version, out.returncode))
        ok = False
    else:
        log('%s: site.yml with gpu_node_drift_only: %d hosts, nothing changed' % (release.version, len(recap)))
    return ok


def summary_rows(text):
    """The fleet summary of a site.yml run: (host, words) of each healthy host's line."""
    summary = text.split('TASK [Summarise the fleet]', 1)[-1].split('PLAY RECAP', 1)[0]
    return re.findall(r'^\s+"(\S+) ok ([^"]*)",?$', summary, re.M)


def step_converge(release, inventory):
    """The demo's converge with this release: site.yml, then site.yml again changing nothing."""
    if not release.run(['ansible', 'gpu_nodes', '-i', inventory, '-o', '-m', 'ansible.builtin.command',
                        '-a', LOAD_IMAGE], stdout=subprocess.DEVNULL):
        log('%s: the lab image did not load' % release.version)
        return False
    runs = []
    for attempt in ('first', 'second'):
        out = subprocess.run(['ansible-playbook', '-i', inventory, os.path.join(release.tree, 'playbooks', 'site.yml')],
                             cwd=release.work, env=release.env(), capture_output=True, text=True)
        recap = re.findall(r'^(\S+)\s+: ok=\d+\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)', out.stdout, re.M)
        runs.append((out, recap, dict(summary_rows(out.stdout))))
        if out.returncode != 0 or not recap or any(u != '0' or f != '0' for _, _, u, f in recap):
            print(out.stdout[-8000:] + out.stderr[-3000:])
            log('%s: the %s site.yml exited %d' % (release.version, attempt, out.returncode))
            return False
    (_, first_recap, first_rows), (second_out, second_recap, second_rows) = runs
    hosts = sorted(host for host, _, _, _ in first_recap)
    problems = []
    if not any(changed != '0' for _, changed, _, _ in first_recap):
        problems.append('the first run changed nothing: the lab was not fresh')
    problems += ['%s: the first run ran no container through the nvidia runtime' % h
                 for h in hosts if 'nvidia_run=ok' not in first_rows.get(h, '').split()]
    problems += ['%s: the second run changed %s' % (h, c) for h, c, _, _ in second_recap if c != '0']
    problems += ['%s: the second run did not find it converged' % h
                 for h in hosts if 'found=converged' not in second_rows.get(h, '').split()]
    if problems:
        print(second_out.stdout[-6000:])
        log('%s: %s' % (release.version, '; '.join(problems)))
        return False
    log('%s: site.yml converged %d hosts (nvidia_run=ok on each), then changed nothing (found=converged on each)'
        % (release.version, len(hosts)))
    return True


def same_reports(reports, newest):
    """Every release's drift report equals the newest's, row for row; the differences printed."""
    ok = True
    for name, by_release in sorted(reports.items()):
        expected = by_release.get(newest)
        for version, rows in sorted(by_release.items()):
            if expected is not None and rows != expected:
                ok = False
                log('drift.yml (%s) on %s differs from %s:\n  %s\n  %s' % (name, version, newest, rows, expected))
    return ok


def lab(*args, **kwargs):
    return subprocess.run(LAB + list(args), cwd=ROOT, **kwargs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--only', help='comma list of releases (default: all of requirements/ansible-core.txt)')
    parser.add_argument('--steps', default=','.join(STEPS), help='comma list of %s' % ', '.join(STEPS))
    args = parser.parse_args()
    all_releases = releases()
    floor, newest = all_releases[0], all_releases[-1]
    dev_core = pins('requirements/dev.txt')['ansible-core']
    if dev_core != 'ansible-core==%s' % newest:
        raise SystemExit('requirements/ansible-core.txt ends with %s, requirements/dev.txt pins %s: make them one'
                         % (newest, dev_core))
    chosen = args.only.split(',') if args.only else all_releases
    steps = args.steps.split(',')
    work = tempfile.mkdtemp(prefix='gpufleet-versions.')
    results = []  # (release, step, ok, seconds)

    def record(version, step, func, *func_args):
        start = time.time()
        try:
            ok = func(*func_args)
        except Exception as exc:  # a step that breaks is a failed step; the others still run
            log('%s %s: %s: %s' % (version, step, type(exc).__name__, exc))
            ok = False
        results.append((version, step, ok, time.time() - start))
        log('%s %s: %s in %.0f s' % (version, step, 'ok' if ok else 'FAILED', time.time() - start))
        return ok

    try:
        found = {}
        for version in chosen:
            bindir = os.path.join(ROOT, '.venv', 'bin') if version == newest else venv(version)
            release = found[version] = Release(version, bindir, work)
            installed = 'install' in steps and record(version, 'install', step_install, release)
            if version != newest:
                if 'sanity' in steps and installed:
                    record(version, 'sanity', step_sanity, release)
                if 'units' in steps:
                    record(version, 'units', step_units, release)
        if 'lab' in steps or 'converge' in steps:
            inventory = os.path.join(ROOT, '.cache', 'lab', 'inventory.yml')
            up = lab('up', '--hosts', '4', '--kinds', LAB_KINDS, '--gpus', '1-8').returncode == 0 and \
                lab('inventory').returncode == 0
            reports = {}
            try:
                for version in (chosen if 'lab' in steps else ()):
                    if not os.path.isdir(found[version].tree):
                        continue
                    record(version, 'lab', lambda r=found[version]: up and step_lab(r, inventory, reports))
                if 'lab' in steps and len(chosen) > 1:
                    record('all', 'same report', same_reports, reports, newest)
                if 'converge' in steps and floor in chosen and os.path.isdir(found[floor].tree):
                    record(floor, 'converge', lambda: up and step_converge(found[floor], inventory))
            finally:
                lab('down')
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print()
    print('%-10s %-14s %-6s %s' % ('release', 'step', 'result', 'seconds'))
    for version, step, ok, seconds in results:
        print('%-10s %-14s %-6s %.0f' % (version, step, 'ok' if ok else 'FAIL', seconds))
    failed = sum(1 for r in results if not r[2])
    print('versions: %d passed, %d failed' % (len(results) - failed, failed))
    return 1 if failed or not results else 0


if __name__ == '__main__':
    sys.exit(main())
