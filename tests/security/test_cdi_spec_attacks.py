"""Root (cdi_spec) writes NVIDIA's CDI spec and its boot refresh: an unprivileged user must not steer the writes.

Root runs the collection's own code (``concerns.cdi.run``, what the module runs) with a fake Module, in a
forked child in a private mount namespace: ``/run`` (so ``/var/run/cdi`` and ``/run/cdi``) and
``/usr/local/sbin`` are empty tmpfs mounts and ``/etc`` an overlay whose writes stay in the namespace, so the
machine's own /etc, /run and init system are never touched. The attacker is a real unprivileged process
(``setpriv``) started in the same namespace; the races loop until a deadline. Victims live in a root-only
vault (0711: the attacker may name paths in it, not list or write it): a secret that must keep its bytes,
mode and owner, and a name that must never come to exist.

Attacks: a spec directory (or the one above it) that the stranger owns or every user may write, with links
planted at the spec and at root's temp names; a stranger's link at the spec path; the stranger racing a
root-owned 0755 spec directory (where it cannot plant anything: the test shows every attempt is denied) and,
where the race is possible, through a parent directory it owns or a sticky one; an ``nvidia-ctk`` that the
stranger owns, every user may write, or that sits in such a directory or behind such a link; a world-writable
directory on the PATH nvidia-ctk searches for the ``nvidia-cdi-hook`` it writes into the spec; a boot script
directory (or its parent, or the init script directory) that the stranger owns. Every run must either refuse,
naming the path, or write the spec correctly into a root-owned directory, and nothing may change in the vault.

``nvidia-ctk`` is a stand-in: a root-owned 0755 shell script that prints a spec NVIDIA's real ``nvidia-ctk cdi
generate`` (``tests/toolkit/build``) made once on the driver kit's fake GPU host (as YAML and JSON, for two
device-name strategies). Running the real program inside every namespace would cost a nested fake-host
namespace per call and cut the races' iterations tenfold; the module's checks of the program (owner, mode,
directories, links) run on the stand-in as they would on NVIDIA's binary. The PATH attack needs NVIDIA's own
lookup of ``nvidia-cdi-hook``, so there the stand-in execs the real ``nvidia-ctk`` on the fake host.
"""

import json
import os
import select
import signal
import stat
import subprocess
import tempfile
import time
import traceback

import pytest

import fakehost
from ansible_collections.gpufleet.nvidia.plugins.module_utils.cdi import boot as cdi_boot
from ansible_collections.gpufleet.nvidia.plugins.module_utils.concerns import cdi as concerns_cdi

TOOLKIT_CTK = os.path.join(fakehost.REPO_DIR, ".cache", "toolkit", "bin", "nvidia-ctk")
# Each race runs this long (the whole file stays under a minute).
RACE = min(float(os.environ.get("GPUFLEET_SECURITY_SECONDS", "4")), 2.0)
SECRET = b"TOPSECRET root-only bytes\n"
SPEC = "/var/run/cdi/nvidia.yaml"
SCRIPT = cdi_boot.SCRIPT_PATH

# Runs as the stranger (in root's namespace) until argv[5], a wall-clock time.
# plant:  links at the file ``dir/name`` and at every temp file root makes beside it
# swap:   ``dir`` is the stranger's, in a directory of the stranger's: swap it for a link to the vault
# sticky: ``dir`` is missing in a sticky directory: make it the stranger's, a link to the vault, or nothing
ATTACK = r'''
import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *unused: sys.exit(0))
mode, directory, name, vault, end = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5])
secret, created = os.path.join(vault, "secret"), os.path.join(vault, "created-by-root")
path = os.path.join(directory, name)

def empty(d):
    for entry in os.listdir(d):
        os.unlink(os.path.join(d, entry))

def once(n):
    if mode == "plant":
        if os.path.lexists(path):
            os.unlink(path)
        os.symlink(secret if n % 2 else created, path)
        for entry in os.listdir(directory):
            if entry.endswith(".tmp"):
                os.unlink(os.path.join(directory, entry))
                os.symlink(secret, os.path.join(directory, entry))
    elif mode == "swap":
        if os.path.islink(directory):
            os.unlink(directory)
            os.mkdir(directory, 0o755)
            os.symlink(secret, path)
        else:
            empty(directory)
            os.rmdir(directory)
            os.symlink(vault, directory)
    else:
        if os.path.islink(directory):
            os.unlink(directory)
        elif os.path.isdir(directory):
            empty(directory)
            os.rmdir(directory)
        if n % 3 == 0:
            os.mkdir(directory, 0o755)
            os.symlink(secret, path)
        elif n % 3 == 1:
            os.symlink(vault, directory)

n = planted = denied = 0
try:
    while time.time() < end:
        n += 1
        try:
            once(n)
            planted += 1
        except OSError:
            denied += 1
finally:
    print(n, planted, denied)
'''


class Refused(Exception):
    def __init__(self, kwargs):
        Exception.__init__(self, kwargs['msg'])
        self.kwargs = kwargs


class Module(object):
    """What ``concerns.cdi.run`` uses of AnsibleModule. nvidia-ctk runs for real (the stand-in); init tools
    are recorded, never run: the namespace has no init system of its own."""

    def __init__(self, **params):
        self.params = dict((name, option.get('default')) for name, option in concerns_cdi.SPEC.items())
        self.params.update(boot=False, boot_unit='gpufleet', init_system='sysvinit')
        self.params.update(params)
        self.check_mode = False
        self._diff = True
        self.commands = []

    def warn(self, msg):
        pass

    def get_bin_path(self, name, *args, **kwargs):
        return None

    def selinux_enabled(self):
        return False

    def fail_json(self, **kwargs):
        raise Refused(kwargs)

    def run_command(self, argv, environ_update=None, data=None):
        self.commands.append(list(argv))
        if argv[0] != self.params['nvidia_ctk']:
            return 0, '', ''
        proc = subprocess.run(argv, env=dict(os.environ, **(environ_update or {})), capture_output=True,
                              text=True, timeout=60)
        return proc.returncode, proc.stdout, proc.stderr


def run_module(**params):
    """One run: {'outcome': 'written' | 'refused' | 'raised', 'msg', 'ran' (commands), 'leaked' (kwargs as JSON)}."""
    module = Module(**params)
    try:
        result = concerns_cdi.run(module)
        found = {'outcome': 'written', 'msg': '', 'actions': result['actions']}
    except Refused as exc:
        found = {'outcome': 'refused', 'msg': str(exc), 'actions': exc.kwargs.get('actions'),
                 'leaked': json.dumps(exc.kwargs, default=str)}
    except Exception as exc:  # whatever a followed link does
        found = {'outcome': 'raised', 'msg': '%s: %s' % (type(exc).__name__, exc)}
    found['ran'] = [argv for argv in module.commands if argv[0] == module.params['nvidia_ctk']]
    return found


# --------------------------------------------------------------------------
# The namespace, the stand-in and the vault
# --------------------------------------------------------------------------

def in_namespace(body, timeout=60):
    """``body()`` (its value: JSON data) in a forked child in a private mount namespace; a child still running
    after ``timeout`` seconds (root hung) is killed and fails the test."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        try:
            os.unshare(os.CLONE_NEWNS)
            subprocess.run(['mount', '--make-rprivate', '/'], check=True)
            answer = {'value': body()}
        except BaseException:
            answer = {'error': traceback.format_exc()}
        try:
            with os.fdopen(write_fd, 'w') as out:
                json.dump(answer, out)
        finally:
            os._exit(0)
    os.close(write_fd)
    chunks, end = [], time.monotonic() + timeout
    try:
        while True:
            if not select.select([read_fd], [], [], max(0.0, end - time.monotonic()))[0]:
                os.kill(pid, signal.SIGKILL)
                pytest.fail('root hung: still running after %ds' % timeout, pytrace=False)
            chunk = os.read(read_fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read_fd)
        os.waitpid(pid, 0)
    answer = json.loads(b''.join(chunks).decode() or '{"error": "the child said nothing"}')
    if 'error' in answer:
        pytest.fail(answer['error'], pytrace=False)
    return answer['value']


def mount(*args):
    subprocess.run(('mount',) + args, check=True)


def private_host(sandbox):
    """In the namespace: empty root-owned /run and /usr/local/sbin, /etc an overlay (writes stay in here)."""
    mount('-t', 'tmpfs', '-o', 'mode=0755', 'gfsec', '/run')
    layers = os.path.join(sandbox, 'layers')
    os.mkdir(layers, 0o700)
    mount('-t', 'tmpfs', '-o', 'mode=0700', 'gfsec', layers)
    for name in ('upper', 'work'):
        os.mkdir(os.path.join(layers, name), 0o755)
    mount('-t', 'overlay', 'gfsec', '-o', 'lowerdir=/etc,upperdir=%s/upper,workdir=%s/work' % (layers, layers), '/etc')
    mount('-t', 'tmpfs', '-o', 'mode=0755', 'gfsec', '/usr/local/sbin')


def tmpfs(path, owner=None, mode=0o755):
    mount('-t', 'tmpfs', '-o', 'mode=%o' % mode, 'gfsec', path)
    os.chmod(path, mode)
    if owner is not None:
        os.chown(path, owner.uid, owner.gid)


def make_dir(path, owner=None, mode=0o755):
    os.mkdir(path)
    os.chmod(path, mode)
    if owner is not None:
        os.chown(path, owner.uid, owner.gid)
    return path


@pytest.fixture(scope='module')
def specs():
    """{(strategies, format): text} as NVIDIA's nvidia-ctk generates them on a fake 2-GPU host; and the host."""
    assert os.access(TOOLKIT_CTK, os.X_OK), '%s is missing (run tests/toolkit/build)' % TOOLKIT_CTK
    host = tempfile.mkdtemp(prefix='gfcdi', dir='/tmp')
    os.chmod(host, 0o755)
    fakehost.layout(host, fakehost.example_description(2))
    fakehost.ld_cache(host)
    found = {}
    env = dict(os.environ, **cdi_boot.ENVIRONMENT)
    for names in (('index', 'uuid'), ('index',)):
        for fmt in ('yaml', 'json'):
            argv = [TOOLKIT_CTK, '--quiet', 'cdi', 'generate', '--format', fmt, '--output=']
            argv += ['--device-name-strategy=%s' % name for name in names]
            proc = fakehost.nsrun(host, argv, env=env, capture_output=True, text=True, timeout=120)
            assert proc.returncode == 0 and 'nvidia.com/gpu' in proc.stdout, proc.stderr
            found[names, fmt] = proc.stdout
    yield found, host
    subprocess.run(['rm', '-rf', '--one-file-system', host], check=False)


def expected(specs, path, names=('index', 'uuid')):
    return specs[0][tuple(names), 'json' if path.endswith('.json') else 'yaml']


def stand_in(sandbox, specs, where=None, owner=None, mode=0o755):
    """The stand-in nvidia-ctk at ``where`` (default ``<sandbox>/bin/nvidia-ctk``): prints the spec NVIDIA's
    generated for the format and strategies asked; one a stranger could change leaves ``ran-as-root``."""
    where = where or os.path.join(sandbox, 'bin', 'nvidia-ctk')
    if not os.path.isdir(os.path.dirname(where)):
        make_dir(os.path.dirname(where))
    for (names, fmt), text in specs[0].items():
        with open(os.path.join(sandbox, 'spec-%s.%s' % ('-'.join(names), fmt)), 'w') as handle:
            handle.write(text)
    with open(where, 'w') as handle:
        handle.write('#!/bin/sh\n'
                     '%s'
                     'fmt=yaml; names=index\n'
                     'case " $* " in *" --format json "*) fmt=json;; esac\n'
                     'case " $* " in *" --device-name-strategy=uuid "*) names=index-uuid;; esac\n'
                     'exec cat %s/spec-$names.$fmt\n'
                     % ('' if owner is None else 'touch %s/ran-as-root\n' % sandbox, sandbox))
    os.chmod(where, mode)
    if owner is not None:
        os.chown(where, owner.uid, owner.gid)
    return where


def make_vault(sandbox):
    vault = make_dir(os.path.join(sandbox, 'vault'), mode=0o700)
    secret = os.path.join(vault, 'secret')
    with open(secret, 'wb') as handle:
        handle.write(SECRET)
    os.chmod(secret, 0o600)
    os.chmod(vault, 0o711)
    return vault


def vault_problems(vault):
    """What root changed in the vault (a list of sentences; empty when nothing)."""
    problems = []
    names = sorted(os.listdir(vault))
    if names != ['secret']:
        problems.append('root wrote into the vault: %s' % names)
    st = os.lstat(os.path.join(vault, 'secret'))
    if stat.S_IMODE(st.st_mode) != 0o600 or (st.st_uid, st.st_gid) != (0, 0):
        problems.append('root changed the secret\'s mode or owner: %o %d:%d' % (st.st_mode, st.st_uid, st.st_gid))
    with open(os.path.join(vault, 'secret'), 'rb') as handle:
        if handle.read() != SECRET:
            problems.append('root wrote into the secret')
    return problems


def root_made(directory, before=()):
    """Root-owned entries in a directory that only the stranger fills (but for the names ``before``); none when
    the stranger left a link in its place."""
    try:
        names = [] if os.path.islink(directory) else os.listdir(directory)
    except OSError:
        return []
    found = []
    for name in set(names) - set(before):
        try:
            if os.lstat(os.path.join(directory, name)).st_uid == 0:
                found.append(name)
        except OSError:
            pass
    return found


def attack(who, mode, directory, name, vault):
    """Start the stranger's loop; returns the process (``finish`` stops it and returns its counts)."""
    return who.python_popen(ATTACK, mode, directory, name, vault, time.time() + RACE + 30,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc):
    alive = proc.poll() is None
    proc.terminate()
    try:
        out, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    counts = [int(word) for word in out.split()] if out.strip() else [0, 0, 0]
    return {'alive': alive, 'tries': counts[0], 'planted': counts[1], 'denied': counts[2], 'stderr': err[-500:]}


def race(params, check, seconds=RACE):
    """Root's runs until the deadline: {outcome-and-message: count}; ``check(found)`` after each run returns
    a problem (stops the loop) or None."""
    outcomes, problems = {}, []
    end = time.monotonic() + seconds
    while not problems:
        found = run_module(**params)
        key = found['outcome'] + (': ' + found['msg'][:200] if found['outcome'] != 'written' else '')
        outcomes[key] = outcomes.get(key, 0) + 1
        problem = check(found)
        if problem:
            problems.append(problem)
        if time.monotonic() >= end:
            break
    return outcomes, problems


def only_refusals(outcomes, *names):
    """Problems with ``outcomes`` when every run had to be refused naming each of ``names``."""
    return ['not refused naming %s: %s' % (' and '.join(names), key) for key in outcomes
            if not key.startswith('refused: ') or not all(name in key for name in names)]


# --------------------------------------------------------------------------
# 1. A spec directory another user can write
# --------------------------------------------------------------------------

@pytest.mark.parametrize('path, kind', [
    ('/var/run/cdi/nvidia.yaml', 'stranger-owned'),
    ('/etc/cdi/nvidia.yaml', 'stranger-owned'),
    ('/run/cdi/nvidia.json', 'world-writable'),
    ('/var/run/cdi/nvidia.yaml', 'sticky world-writable'),
    ('/etc/cdi/nvidia.json', 'group-writable'),
])
def test_a_spec_directory_another_user_can_write_is_refused_in_every_race(sandbox, stranger, specs, path, kind):
    ctk = stand_in(sandbox, specs)
    vault = make_vault(sandbox)
    directory = os.path.dirname(path)
    real = directory.replace('/var/run', '/run')

    def body():
        private_host(sandbox)
        modes = {'stranger-owned': 0o755, 'world-writable': 0o777, 'sticky world-writable': 0o1777,
                 'group-writable': 0o775}
        make_dir(real, stranger if kind == 'stranger-owned' else None, modes[kind])
        if kind == 'group-writable':
            os.chown(real, 0, stranger.gid)
        attacker = attack(stranger, 'plant', real, os.path.basename(path), vault)
        try:
            outcomes, problems = race(dict(path=path, nvidia_ctk=ctk),
                                      lambda found: 'nvidia-ctk ran' if found['ran'] else None)
        finally:
            counts = finish(attacker)
        return {'outcomes': outcomes, 'problems': problems, 'attacker': counts, 'root_made': root_made(real)}

    seen = in_namespace(body)
    print(kind, path, json.dumps(seen, indent=1))
    assert not vault_problems(vault)
    assert seen['attacker']['alive'] and seen['attacker']['planted'] > 0, seen['attacker']
    assert not seen['problems'], seen
    assert not seen['root_made'], 'root wrote %s into a directory the stranger can write' % seen['root_made']
    assert not only_refusals(seen['outcomes'], real, 'refusing'), seen['outcomes']


# --------------------------------------------------------------------------
# 2. A link at the spec path
# --------------------------------------------------------------------------

@pytest.mark.parametrize('kind', ['stranger link to the secret', 'stranger link to a new file',
                                  'dangling root link', 'hard link to the secret'])
def test_a_link_at_the_spec_path_is_not_written_through(sandbox, stranger, specs, kind):
    """The directory is root's 0755: the stranger could not plant the link there, so root plants it, standing
    in for one left from a time the directory was open (or, for the hard link, for a host without
    fs.protected_hardlinks). A root-owned link to an existing file is root's own choice and is followed by
    design (``host.paths.resolve_path``), so it is not an attack."""
    ctk = stand_in(sandbox, specs)
    vault = make_vault(sandbox)
    secret, created = os.path.join(vault, 'secret'), os.path.join(vault, 'created-by-root')

    def body():
        private_host(sandbox)
        make_dir('/run/cdi')
        spec = '/run/cdi/nvidia.yaml'
        if kind == 'hard link to the secret':  # a vault on the spec's file system
            same_fs_vault = make_vault(os.path.join('/run'))
            os.link(os.path.join(same_fs_vault, 'secret'), spec)
        else:
            os.symlink(created if 'new' in kind or 'dangling' in kind else secret, spec)
            if kind.startswith('stranger'):
                os.lchown(spec, stranger.uid, stranger.gid)
        found = run_module(path=SPEC, nvidia_ctk=ctk)
        found['is_link'] = os.path.islink(spec)
        found['spec'] = None
        if not found['is_link']:
            with open(spec) as handle:
                found['spec'] = handle.read()
        if kind == 'hard link to the secret':
            found['vault'] = vault_problems(same_fs_vault)
        return found

    found = in_namespace(body)
    assert not vault_problems(vault) and not found.get('vault'), found
    assert 'TOPSECRET' not in found.get('leaked', '') + found['msg'], 'root read the secret through the link'
    if kind == 'hard link to the secret':
        assert found['outcome'] == 'written' and found['spec'] == expected(specs, SPEC), found
    else:
        assert found['outcome'] == 'refused' and '/run/cdi/nvidia.yaml' in found['msg'] and found['is_link'], found
        assert not found['ran'], 'nvidia-ctk ran although the spec path was refused'


# --------------------------------------------------------------------------
# 3. Racing root's writes
# --------------------------------------------------------------------------

def test_a_root_owned_spec_directory_leaves_the_stranger_nothing_to_race(sandbox, stranger, specs):
    """In root's 0755 /run/cdi the stranger can plant nothing (every try is denied), while root writes the spec
    again and again (the device names alternate, so each run writes)."""
    ctk = stand_in(sandbox, specs)
    vault = make_vault(sandbox)

    def body():
        private_host(sandbox)
        make_dir('/run/cdi')
        attacker = attack(stranger, 'plant', '/run/cdi', 'nvidia.yaml', vault)
        runs = {'n': 0}

        def check(found):
            names = ('index', 'uuid') if runs['n'] % 2 else ('index',)
            with open('/run/cdi/nvidia.yaml') as handle:
                text = handle.read()
            st = os.lstat('/run/cdi/nvidia.yaml')
            if found['outcome'] != 'written' or text != expected(specs, SPEC, names) or st.st_uid != 0 \
                    or stat.S_IMODE(st.st_mode) != 0o644:
                return 'run %d: %s, %d bytes, uid %d mode %o' % (runs['n'], found, len(text), st.st_uid, st.st_mode)
            runs['n'] += 1
            return None

        try:
            outcomes, problems = {}, []
            end = time.monotonic() + RACE
            while not problems and time.monotonic() < end:
                names = ['index', 'uuid'] if runs['n'] % 2 else ['index']
                found = run_module(path=SPEC, nvidia_ctk=ctk, device_name_strategy=names)
                outcomes[found['outcome']] = outcomes.get(found['outcome'], 0) + 1
                problem = check(found)
                if problem:
                    problems.append(problem)
        finally:
            counts = finish(attacker)
        return {'outcomes': outcomes, 'problems': problems, 'attacker': counts,
                'left': sorted(os.listdir('/run/cdi'))}

    seen = in_namespace(body)
    print(json.dumps(seen, indent=1))
    assert not vault_problems(vault)
    assert not seen['problems'], seen
    assert seen['attacker']['alive'] and seen['attacker']['tries'] > 10, seen['attacker']
    assert seen['attacker']['planted'] == 0, 'the stranger planted links in root\'s 0755 /run/cdi: %s' % seen
    assert seen['outcomes'].get('written', 0) > 5 and seen['left'] == ['nvidia.yaml'], seen


@pytest.mark.parametrize('kind', ['stranger-owned /run', 'sticky world-writable /run'])
def test_a_parent_directory_the_stranger_can_write_is_refused_or_written_safely(sandbox, stranger, specs, kind):
    """``stranger-owned``: the stranger swaps /run/cdi (its own) for a link to the vault; every run must be
    refused naming /run. ``sticky``: /run/cdi is missing and the stranger keeps making it its own directory
    or a link to the vault; a run may write only into a /run/cdi root made (the test removes it after each
    such run, so the race goes on)."""
    ctk = stand_in(sandbox, specs)
    vault = make_vault(sandbox)

    def body():
        private_host(sandbox)
        if kind.startswith('stranger'):
            tmpfs('/run', stranger)
            make_dir('/run/cdi', stranger)
            attacker = attack(stranger, 'swap', '/run/cdi', 'nvidia.yaml', vault)
        else:
            tmpfs('/run', mode=0o1777)
            attacker = attack(stranger, 'sticky', '/run/cdi', 'nvidia.yaml', vault)

        def check(found):
            if found['outcome'] != 'written':
                return None
            if kind.startswith('stranger'):
                return 'written through a /run the stranger owns'
            st = os.lstat('/run/cdi')
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0:
                return 'root wrote the spec into a /run/cdi of uid %d (mode %o)' % (st.st_uid, st.st_mode)
            with open('/run/cdi/nvidia.yaml') as handle:
                if handle.read() != expected(specs, SPEC):
                    return 'written, but the spec is wrong'
            os.unlink('/run/cdi/nvidia.yaml')
            os.rmdir('/run/cdi')
            return None

        try:
            outcomes, problems = race(dict(path=SPEC, nvidia_ctk=ctk), check)
        finally:
            counts = finish(attacker)
        return {'outcomes': outcomes, 'problems': problems, 'attacker': counts}

    seen = in_namespace(body)
    print(kind, json.dumps(seen, indent=1))
    assert not vault_problems(vault)
    assert not seen['problems'], seen
    assert seen['attacker']['alive'] and seen['attacker']['planted'] > 0, seen['attacker']
    if kind.startswith('stranger'):
        assert not only_refusals(seen['outcomes'], '/run', 'refusing'), seen['outcomes']
    else:
        assert all(key == 'written' or (key.startswith('refused: ') and '/run/cdi' in key)
                   for key in seen['outcomes']), seen['outcomes']


# --------------------------------------------------------------------------
# 4. nvidia-ctk another user can change
# --------------------------------------------------------------------------

@pytest.mark.parametrize('kind', ['stranger-owned', 'world-writable', 'group-writable', 'in a world-writable directory',
                                  'in a sticky directory', 'in a stranger\'s directory', 'behind a stranger\'s link',
                                  'a root link to a stranger\'s program'])
def test_an_nvidia_ctk_another_user_can_change_is_never_run(sandbox, stranger, specs, kind):
    bin_dir = os.path.join(sandbox, 'bin')
    good = stand_in(sandbox, specs)
    ctk, owner, mode = good, None, 0o755
    if kind in ('stranger-owned', 'world-writable', 'group-writable', 'a root link to a stranger\'s program'):
        owner = stranger if kind in ('stranger-owned', 'a root link to a stranger\'s program') else None
        mode = {'world-writable': 0o777, 'group-writable': 0o775}.get(kind, 0o755)
        ctk = stand_in(sandbox, specs, os.path.join(bin_dir, 'theirs'), owner=owner or stranger, mode=mode)
        if owner is None:
            os.chown(ctk, 0, stranger.gid)
        if kind.startswith('a root link'):
            os.symlink(ctk, os.path.join(bin_dir, 'nvidia-ctk-link'))
            ctk = os.path.join(bin_dir, 'nvidia-ctk-link')
    elif kind.startswith('in a'):
        directory = os.path.join(sandbox, 'open')
        make_dir(directory, stranger if 'stranger' in kind else None,
                 {'in a world-writable directory': 0o777, 'in a sticky directory': 0o1777}.get(kind, 0o755))
        ctk = stand_in(sandbox, specs, os.path.join(directory, 'nvidia-ctk'))
    else:
        ctk = os.path.join(bin_dir, 'nvidia-ctk-link')
        os.symlink(good, ctk)
        os.lchown(ctk, stranger.uid, stranger.gid)

    def body():
        private_host(sandbox)
        make_dir('/run/cdi')
        found = run_module(path=SPEC, nvidia_ctk=ctk)
        found['spec_written'] = os.path.lexists('/run/cdi/nvidia.yaml')
        return found

    found = in_namespace(body)
    assert found['outcome'] == 'refused' and ctk in found['msg'] and 'cannot run' in found['msg'], found
    assert not found['ran'] and not os.path.exists(os.path.join(sandbox, 'ran-as-root')), 'root ran %s' % ctk
    assert not found['spec_written'], found


def test_a_world_writable_directory_on_nvidia_ctks_path_does_not_put_a_strangers_hook_in_the_spec(sandbox, stranger, specs):
    """nvidia-ctk writes into the spec the ``nvidia-cdi-hook`` it finds on PATH (``cdi.boot.ENVIRONMENT``:
    /usr/local/sbin:/usr/local/bin:...), and every container engine then runs that program as root when it
    creates a GPU container. With /usr/local/bin open to every user, the stranger's program must not end up
    there: root refuses (naming the directory) or writes a spec without it. NVIDIA's real nvidia-ctk runs
    here, on the driver kit's fake host (the stand-in only enters it)."""
    host = specs[1]
    ctk = os.path.join(sandbox, 'bin', 'nvidia-ctk')
    make_dir(os.path.dirname(ctk))
    with open(ctk, 'w') as handle:
        handle.write('#!/bin/sh\nexec %s\n' % ' '.join(fakehost.nsrun_argv(host, [TOOLKIT_CTK]) + ['"$@"']))
    os.chmod(ctk, 0o755)
    hook = '/usr/local/bin/nvidia-cdi-hook'

    def body():
        private_host(sandbox)
        make_dir('/run/cdi')
        tmpfs('/usr/local/bin', mode=0o777)
        res = stranger.run(['sh', '-c', 'printf "#!/bin/sh\\nexit 0\\n" > %s && chmod 0755 %s' % (hook, hook)])
        assert res.returncode == 0, res.stderr
        found = run_module(path=SPEC, nvidia_ctk=ctk)
        found['spec'] = open('/run/cdi/nvidia.yaml').read() if os.path.exists('/run/cdi/nvidia.yaml') else ''
        return found

    found = in_namespace(body)
    assert hook not in found['spec'], ('root wrote a CDI spec whose hooks run %s, a program of uid %d in a directory '
                                       'every user can write: %s' % (hook, stranger.uid, found['outcome']))
    # Refused before nvidia-ctk runs, naming the PATH directory (a spec written without the hook would do too).
    assert found['outcome'] == 'written' or (
        found['outcome'] == 'refused' and 'The PATH directory /usr/local/bin' in found['msg']
        and not found['ran'] and not found['spec']), found


# --------------------------------------------------------------------------
# 5. The boot pieces' directories
# --------------------------------------------------------------------------

@pytest.mark.parametrize('kind', ['stranger-owned /usr/local/sbin', 'world-writable /usr/local/sbin',
                                  'stranger-owned /usr/local', 'stranger-owned /etc/init.d'])
def test_a_boot_directory_another_user_can_write_is_refused_in_every_race(sandbox, stranger, specs, kind):
    """The stranger plants links to the vault at the boot script (or swaps /usr/local/sbin for a link to the
    vault, when it owns /usr/local) while root runs; root must write nothing there and refuse naming the
    directory. Nor may the secret reach the module's answer (the diff of the piece it read)."""
    ctk = stand_in(sandbox, specs)
    vault = make_vault(sandbox)
    directory = kind.split(' ')[-1]

    def body():
        private_host(sandbox)
        make_dir('/run/cdi')
        before = []
        if directory == '/usr/local':
            tmpfs('/usr/local', stranger)
            make_dir('/usr/local/sbin', stranger)
            attacker = attack(stranger, 'swap', '/usr/local/sbin', 'gpufleet-cdi-refresh', vault)
            watched = '/usr/local/sbin'
        else:
            if directory == '/etc/init.d':
                os.chown(directory, stranger.uid, stranger.gid)
                before.extend(os.listdir(directory))
            else:
                tmpfs(directory, stranger if kind.startswith('stranger') else None,
                      0o755 if kind.startswith('stranger') else 0o777)
            attacker = attack(stranger, 'plant', directory, 'gpufleet-cdi-refresh', vault)
            watched = directory
        leaks = []

        def check(found):
            if 'TOPSECRET' in found.get('leaked', ''):
                leaks.append(found['msg'])
                return 'the secret is in the module\'s answer'
            return None

        try:
            outcomes, problems = race(dict(path=SPEC, nvidia_ctk=ctk, boot=True), check)
        finally:
            counts = finish(attacker)
        return {'outcomes': outcomes, 'problems': problems, 'attacker': counts, 'root_made': root_made(watched, before)}

    seen = in_namespace(body)
    print(kind, json.dumps(seen, indent=1))
    assert not vault_problems(vault)
    assert seen['attacker']['alive'] and seen['attacker']['planted'] > 0, seen['attacker']
    assert not seen['root_made'], 'root wrote %s into a directory the stranger can write' % seen['root_made']
    assert not seen['problems'], 'root read the secret through the stranger\'s link: %s' % seen['problems']
    assert not only_refusals(seen['outcomes'], directory, 'refusing'), seen['outcomes']


def test_a_strangers_boot_script_that_matches_is_still_refused(sandbox, stranger, specs):
    """In a /usr/local/sbin the stranger owns, a script of the stranger's with exactly the text the module would
    write: root must not install an init script that runs it at boot (the stranger can change it any time)."""
    ctk = stand_in(sandbox, specs)

    def body():
        private_host(sandbox)
        make_dir('/run/cdi')
        tmpfs('/usr/local/sbin', stranger)
        text = cdi_boot.render_script(SPEC, ctk, ['index', 'uuid'], 'yaml')
        res = stranger.python('import sys; open(sys.argv[1], "w").write(sys.argv[2])', SCRIPT, text)
        assert res.returncode == 0, res.stderr
        os.chmod(SCRIPT, 0o755)  # the stranger's own file: it could chmod it too
        found = run_module(path=SPEC, nvidia_ctk=ctk, boot=True)
        found['init_script'] = os.path.exists('/etc/init.d/gpufleet-cdi-refresh')
        return found

    found = in_namespace(body)
    assert found['outcome'] == 'refused' and '/usr/local/sbin' in found['msg'], (
        'root accepted a boot script the stranger owns (%s; init script installed: %s, actions %s)'
        % (found['outcome'], found['init_script'], found.get('actions')))


def test_a_fifo_at_the_boot_script_does_not_hang_root(sandbox, stranger, specs):
    """A stranger who owns /usr/local/sbin plants a FIFO at the boot script: root must refuse, not block
    forever opening it."""
    ctk = stand_in(sandbox, specs)

    def body():
        private_host(sandbox)
        make_dir('/run/cdi')
        tmpfs('/usr/local/sbin', stranger)
        res = stranger.run(['mkfifo', SCRIPT])
        assert res.returncode == 0, res.stderr
        return run_module(path=SPEC, nvidia_ctk=ctk, boot=True)

    found = in_namespace(body, timeout=15)
    assert found['outcome'] == 'refused' and '/usr/local/sbin' in found['msg'], found


def test_state_absent_removes_nothing_through_a_directory_the_stranger_owns(sandbox, stranger, specs):
    """``state: absent`` with /usr/local the stranger's: it points /usr/local/sbin at a root directory that
    holds a root file named like our script (with our marker). Root must refuse naming /usr/local, not
    unlink the file there."""
    ctk = stand_in(sandbox, specs)
    victim_dir = make_dir(os.path.join(sandbox, 'victim'))
    victim = os.path.join(victim_dir, 'gpufleet-cdi-refresh')
    with open(victim, 'w') as handle:
        handle.write(cdi_boot.render_script(SPEC, ctk, ['index', 'uuid'], 'yaml'))

    def body():
        private_host(sandbox)
        tmpfs('/usr/local', stranger)
        res = stranger.run(['ln', '-s', victim_dir, '/usr/local/sbin'])
        assert res.returncode == 0, res.stderr
        return run_module(state='absent', path=SPEC, nvidia_ctk=ctk, boot=True)

    found = in_namespace(body)
    assert os.path.exists(victim), 'root unlinked %s through the stranger\'s /usr/local/sbin link (%s)' % (
        victim, found.get('actions'))
    assert found['outcome'] == 'refused' and '/usr/local' in found['msg'], found


# --------------------------------------------------------------------------
# 4. The boot refresh's lock
# --------------------------------------------------------------------------

# Runs as the stranger until argv[2]: open root's lock (the refresh's temp directory) and flock it, again and again.
HOLD_THE_LOCK = r'''
import errno, fcntl, json, os, sys, time
tries = held = denied = 0
while time.time() < float(sys.argv[2]):
    tries += 1
    try:
        fd = os.open(sys.argv[1], os.O_RDONLY)
    except OSError as exc:
        denied += exc.errno == errno.EACCES
        continue
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held += 1
        time.sleep(0.2)
    except OSError:
        pass
    finally:
        os.close(fd)
print(json.dumps({'tries': tries, 'held': held, 'denied': denied}))
'''


def test_no_other_user_can_hold_the_boot_refresh_lock(sandbox, stranger):
    """The refresh serialises on its root-only (0700) temp directory: the stranger, trying to open and lock it until
    a deadline, is denied every time, and root's refreshes meanwhile all run to the end, none kept waiting."""
    spec = os.path.join(sandbox, 'cdi', 'nvidia.yaml')
    ctk = os.path.join(sandbox, 'nvidia-ctk')
    with open(ctk, 'w') as handle:
        handle.write('#!/bin/sh\nprintf "kind: nvidia.com/gpu\\n"\n')
    os.chmod(ctk, 0o755)
    script = os.path.join(sandbox, 'refresh')
    with open(script, 'w') as handle:
        handle.write(cdi_boot.render_script(spec, ctk, ['index', 'uuid'], 'yaml'))
    assert subprocess.run(['sh', script], check=False).returncode == 0
    private = cdi_boot.temp_directory(os.path.dirname(spec))
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o700 and os.stat(private).st_uid == 0
    deadline = time.time() + RACE
    attacker = stranger.popen([fakehost.SYSTEM_PYTHON, '-c', HOLD_THE_LOCK, private, str(deadline)],
                              stdout=subprocess.PIPE, universal_newlines=True)
    runs = []
    while time.time() < deadline:
        # a refresh kept waiting on a lock the stranger held would run into this timeout
        runs.append(subprocess.run(['sh', script], check=False, timeout=60).returncode)
    seen = json.loads(attacker.communicate(timeout=60)[0])
    assert seen['tries'] > 10 and seen['held'] == 0 and seen['denied'] == seen['tries'], seen
    assert runs and set(runs) == {0}, runs
    with open(spec) as handle:
        assert handle.read() == 'kind: nvidia.com/gpu\n'
