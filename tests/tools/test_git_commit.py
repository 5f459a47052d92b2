"""cmake/git_commit.cmake, which writes the commit kvdice bench and eval run record: it follows new
commits and uncommitted changes of the tracked files, says "unknown" outside git, and rewrites the
header only when its value changes (so a build without a new commit recompiles nothing)."""
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "cmake" / "git_commit.cmake"


def write_header(source, out):
    subprocess.run(["cmake", f"-DSOURCE_DIR={source}", f"-DOUT={out}", "-P", str(SCRIPT)], check=True,
                   capture_output=True, timeout=60)
    return out.read_text().split('KVDICE_GIT_COMMIT "')[1].split('"')[0]


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          timeout=60).stdout.strip()


def test_the_header_follows_commits_and_uncommitted_changes(tmp_path):
    repo, out = tmp_path / "repo", tmp_path / "kvdice_git_commit.h"
    repo.mkdir()
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "test@kvdice")
    git(repo, "config", "user.name", "test")
    (repo / "a.txt").write_text("one\n")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-q", "-m", "one")
    first = git(repo, "rev-parse", "--short=12", "HEAD")
    assert write_header(repo, out) == first

    written = out.stat().st_mtime_ns
    (repo / "untracked.txt").write_text("not part of the commit\n")
    assert write_header(repo, out) == first
    assert out.stat().st_mtime_ns == written, "an unchanged value rewrote the header"

    (repo / "a.txt").write_text("two\n")
    assert write_header(repo, out) == first + "-dirty"

    git(repo, "commit", "-q", "-am", "two")
    second = git(repo, "rev-parse", "--short=12", "HEAD")
    assert second != first
    assert write_header(repo, out) == second


def test_outside_git_the_commit_is_unknown(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    assert write_header(plain, tmp_path / "h.h") == "unknown"
