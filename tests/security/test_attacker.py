"""The attackers the other tests use are real and unprivileged."""


def test_attacker_really_runs_unprivileged(stranger, service_user):
    for who in (stranger, service_user):
        out = who.python("import os; print(os.getuid(), os.getgid(), os.getgroups())")
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == [str(who.uid), str(who.gid), "[]"]
        denied = who.python("open('/etc/gpufleet-attacker-probe', 'w')")
        assert denied.returncode != 0 and "PermissionError" in denied.stderr
        proc = who.python_popen("import time; time.sleep(0.5)")
        assert proc.wait() == 0
