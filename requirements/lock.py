"""Writes train.txt and test.txt, the pinned, hashed requirements scripts/setup.sh installs.

Run with the project's venv Python after changing train.in or test.in:
    .venv/bin/python requirements/lock.py
pip resolves each .in file (a dry run: nothing is installed or downloaded beyond metadata);
test.txt holds what test.in adds to train.txt's set. Each pin lists the sha256 of every
Linux x86_64 or pure-Python file of that version on PyPI, so the lock serves any CPython
version those files cover, and `pip install --require-hashes` refuses anything else.
"""
import json
import pathlib
import re
import subprocess
import sys
import tempfile
import urllib.request

HERE = pathlib.Path(__file__).resolve().parent
WANTED_FILE = re.compile(r"(none-any|manylinux[^-]*x86_64[^-]*)\.whl$|\.tar\.gz$")


def resolve(*inputs):
    with tempfile.TemporaryDirectory() as tmp:
        report = pathlib.Path(tmp) / "report.json"
        command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                   "--report", str(report)]
        for path in inputs:
            command += ["-r", str(path)]
        subprocess.run(command, check=True)
        installs = json.loads(report.read_text())["install"]
    return {item["metadata"]["name"].lower().replace("_", "-"): item["metadata"]["version"] for item in installs}


def release_files(name, version):
    # The version's own page, else the project page's releases (a version page can be missing).
    try:
        with urllib.request.urlopen(f"https://pypi.org/pypi/{name}/{version}/json", timeout=60) as response:
            return json.load(response)["urls"]
    except OSError:
        pass
    url = f"https://pypi.org/pypi/{name}/json"
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return json.load(response)["releases"].get(version, [])
    except OSError as error:
        sys.exit(f"{name}=={version}: {url}: {error}")


def hashes(name, version):
    files = release_files(name, version)
    wheels = [f for f in files if WANTED_FILE.search(f["filename"]) and f["packagetype"] == "bdist_wheel"]
    chosen = wheels or [f for f in files if WANTED_FILE.search(f["filename"])]
    return sorted({f["digests"]["sha256"] for f in chosen})


def write(path, pins, header):
    lines = [header]
    for name in sorted(pins):
        digests = hashes(name, pins[name])
        lines.append(f"{name}=={pins[name]} \\\n" + " \\\n".join(f"    --hash=sha256:{d}" for d in digests))
    path.write_text("\n".join(lines) + "\n")
    print(f"{path.name}: {len(pins)} packages")


train = resolve(HERE / "train.in")
everything = resolve(HERE / "train.in", HERE / "test.in")
test = {name: version for name, version in everything.items() if train.get(name) != version}
clash = sorted(name for name in test if name in train)
if clash:
    sys.exit(f"test.in moves pins of train.in: {', '.join(clash)}")
note = "# Written by requirements/lock.py from {} (do not edit by hand).\n"
write(HERE / "train.txt", train, note.format("train.in"))
write(HERE / "test.txt", test, note.format("test.in, beside train.txt"))
