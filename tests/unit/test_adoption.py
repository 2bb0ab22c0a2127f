"""The agent as a child subreaper: a spare whose parent left is followed to its exit code, and a
stray orphan is reaped only once it has stayed a zombie for a whole poll. Run in a child python:
becoming a subreaper would make the test runner the parent of every orphan below it."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO

CHILD = r"""
import json, os, time
from launcher.agent.adoption import Adopted, StrayReaper, become_subreaper

def orphan(code, linger):
    r, w = os.pipe()
    middle = os.fork()
    if middle == 0:
        spare = os.fork()
        if spare == 0:
            time.sleep(linger)
            os._exit(code)
        os.write(w, str(spare).encode())
        os._exit(0)  # the spare's parent leaves at once, as worker/forked_spare.py's middle process does
    os.waitpid(middle, 0)
    os.close(w)
    return int(os.read(r, 32))

said = {"subreaper": become_subreaper()}
spare = orphan(3, 0.3)
said["adopted_parent"] = int(open(f"/proc/{spare}/stat").read().rsplit(")", 1)[1].split()[1]) == os.getpid()
said["exit"] = Adopted(spare).wait(timeout=10)
killed = orphan(0, 30)
os.kill(killed, 9)
said["killed"] = Adopted(killed).wait(timeout=10)
stray = orphan(0, 0)
time.sleep(0.2)  # it has ended: a zombie of ours now
reaper = StrayReaper()
said["first_poll"] = reaper.reap(followed=set())
said["followed_poll"] = reaper.reap(followed={stray})
said["second_poll"] = reaper.reap(set()) + reaper.reap(set())  # seen once more, then reaped
print(json.dumps({**said, "stray": stray}))
"""


def test_an_orphan_is_adopted_followed_to_its_exit_and_a_stray_is_reaped_after_a_whole_poll() -> None:
    done = subprocess.run([sys.executable, "-c", CHILD], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert said["subreaper"] and said["adopted_parent"], said
    assert said["exit"] == 3 and said["killed"] == -9, said
    assert said["first_poll"] == [], "a zombie seen once may be a child its owner is about to reap"
    assert said["followed_poll"] == [], "one the agent follows is never reaped from under it"
    assert said["second_poll"] == [said["stray"]], said
