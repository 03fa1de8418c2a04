"""The replayed Termux .debs on the emulated device: installed, served, upgraded
and removed with dpkg (run by tools/termux/replay.sh inside the arm64 root,
with Debian's python3, under qemu-aarch64).

Usage: python3 device_packages.py PREFIX DEBS_DIR MODEL_DIR PROBE_SCRIPT

The Termux prefix PREFIX starts empty and gets its own dpkg database
(PREFIX/var/lib/dpkg, as Termux's dpkg has). Termux's own packages that the
.debs depend on are stood in for, and say so: a venv at PREFIX is
Termux's python and python-pip (the same layout: PREFIX/bin/python,
PREFIX/lib/pythonX.Y/site-packages), Debian's runit is termux-services' runit,
and one stand-in package provides their names to dpkg and holds
termux-services' svlogger and the debpython scripts (py3compile, py3clean).

Steps, each checked:
 1. dpkg -i the older python-mnn-engine with mnn; its postinst pip-installs
    the runtime deps; the engine imports and generates (PROBE_SCRIPT) without
    the backend subpackages, then with them;
 2. the user edits the conffile; termux-services' service-daemon starts
    runsvdir over PREFIX/var/service from a Termux shell's environment (HOME
    the Termux home, not the builder's): the service stays down until sv up,
    then runs with that HOME, answers a chat completion and logs through svlogger;
 3. dpkg -i the newer python-mnn-engine over it (--force-confold): the user's
    conffile is kept, the new one is beside it as .dpkg-dist, the service
    restarted on the new code answers again;
 4. dpkg -r everything: nothing of the packages is left but the conffiles
    (and what dpkg does not own: pip-installed deps, logs); dpkg -P removes those.
Prints one JSON object; "problems" lists every expectation that did not hold.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

PORT = 18081
SCRIPTED_ANSWER = "Hello! I am a tiny MNN test model"
SERVICE = "mnn-engine"
ENGINE = "python-mnn-engine"
BASE_DEPS = ["libc++", "python", "python-pip", "termux-services"]

# termux-services' svlogger (termux/termux-services, svlogger): one log
# directory per service under $PREFIX/var/log/sv, written by svlogd
SVLOGGER = """#!{prefix}/bin/sh
svname=$(basename "$(dirname "$(pwd)")")
mkdir -p "{prefix}/var/log/sv/$svname"
exec svlogd -tt "{prefix}/var/log/sv/$svname"
"""


class Device:
    def __init__(self, prefix: str, debs: Path, model: str, probe: str) -> None:
        self.prefix, self.debs, self.model, self.probe_script = prefix, debs, model, probe
        self.admindir = f"{prefix}/var/lib/dpkg"
        self.problems: list[str] = []
        self.report: dict[str, object] = {}
        #: the Termux home ($TERMUX_ANDROID_HOME: the prefix's sibling)
        self.home = str(Path(prefix).parent / "home")
        # what a Termux shell has (the app sets HOME, PREFIX, TMPDIR, LANG), where every
        # step runs and termux-services' service-daemon is started from
        self.env = {"PATH": f"{prefix}/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": self.home, "PREFIX": prefix,
                    "TMPDIR": f"{prefix}/tmp", "LANG": "en_US.UTF-8", "QEMU_CPU": "max",
                    "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_CERT": "/etc/ssl/certs/host-ca-certificates.crt"}
        self.services_started = False

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(args, capture_output=True, text=True, env=self.env)
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed ({result.returncode}): {result.stdout[-2000:]}"
                               f"{result.stderr[-2000:]}")
        return result

    def dpkg(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run("dpkg", f"--admindir={self.admindir}", *args)

    def expect(self, condition: bool, problem: str) -> None:
        if not condition:
            self.problems.append(problem)

    def deb(self, name: str, version: str | None = None) -> str:
        found = sorted(self.debs.glob(f"{name}_{version or '*'}_*.deb"))
        if len(found) != 1:
            raise RuntimeError(f"not one {name} {version or ''} .deb in {self.debs}: {found}")
        return str(found[0])

    def status(self, name: str) -> str:
        result = self.run("dpkg-query", f"--admindir={self.admindir}", "-W", "-f=${Status} ${Version}", name,
                          check=False)
        return result.stdout.strip() if result.returncode == 0 else "unknown"

    def files(self) -> set[str]:
        root = Path(self.prefix)
        return {str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir()
                and not str(p.relative_to(root)).startswith("var/lib/dpkg/")}

    # --- the stand-ins for Termux's base system ---
    def base_system(self) -> None:
        prefix = Path(self.prefix)
        Path(self.prefix, "tmp").mkdir(parents=True, exist_ok=True)  # $TMPDIR, as Termux's bootstrap has it
        Path(self.home).mkdir(exist_ok=True)
        self.run("/usr/bin/python3", "-m", "venv", self.prefix)
        for sub in ("info", "updates"):
            Path(self.admindir, sub).mkdir(parents=True, exist_ok=True)
        for name in ("status", "available"):
            Path(self.admindir, name).touch()
        # Termux's dpkg is built for "aarch64"; Debian's knows arm64 and takes aarch64 as a foreign architecture
        self.dpkg("--add-architecture", "aarch64")
        stand_in = Path("/tmp/termux-base-stand-in")
        shutil.rmtree(stand_in, ignore_errors=True)
        root = stand_in / prefix.relative_to("/")
        (root / "bin").mkdir(parents=True)
        (root / "bin" / "sh").symlink_to("/bin/sh")
        for tool in ("py3compile", "py3clean"):  # Termux's python ships debpython's
            (root / "bin" / tool).write_text(f"#!/bin/sh\nexec /usr/bin/{tool} \"$@\"\n")
            (root / "bin" / tool).chmod(0o755)
        svlogger = root / "share" / "termux-services" / "svlogger"
        svlogger.parent.mkdir(parents=True)
        svlogger.write_text(SVLOGGER.format(prefix=self.prefix))
        svlogger.chmod(0o755)
        (stand_in / "DEBIAN").mkdir()
        (stand_in / "DEBIAN" / "control").write_text(
            "Package: termux-base-stand-in\nVersion: 1\nArchitecture: aarch64\nMaintainer: replay\n"
            f"Provides: {', '.join(BASE_DEPS)}\n"
            "Description: stand-in for Termux's python, python-pip, libc++ and termux-services\n")
        self.run("dpkg-deb", "--root-owner-group", "--build", str(stand_in), "/tmp/termux-base-stand-in.deb")
        self.dpkg("-i", "/tmp/termux-base-stand-in.deb")

    def probe(self, packages: list[str]) -> dict[str, object]:
        result = self.run(f"{self.prefix}/bin/python", self.probe_script, self.prefix, self.model, *packages,
                          check=False)
        lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
        if result.returncode != 0 or not lines:
            self.problems.append(f"the probe with {packages} failed: {result.stderr[-2000:]}")
            return {}
        report = json.loads(lines[-1])
        self.problems += [f"probe {packages}: {p}" for p in report.get("problems", [])]
        return report

    # --- the service, through runit as termux-services runs it ---
    def service_dir(self) -> str:
        return f"{self.prefix}/var/service/{SERVICE}"

    def sv(self, command: str) -> str:
        return self.run("sv", command, self.service_dir(), check=False).stdout.strip()

    # termux-services' service-daemon (termux/termux-services), started by its
    # profile.d script from a Termux shell: runsvdir over $SVDIR, in the background
    # through start-stop-daemon with a pid file; stopped with SIGHUP, then the
    # supervisors it leaves are killed and their state removed
    def service_daemon_pidfile(self) -> str:
        return f"{self.prefix}/var/run/service-daemon.pid"

    def start_services(self) -> None:
        Path(self.service_daemon_pidfile()).parent.mkdir(parents=True, exist_ok=True)
        env = dict(self.env, SVDIR=f"{self.prefix}/var/service", LOGDIR=f"{self.prefix}/var/log")
        subprocess.run(["start-stop-daemon", "-S", "-b", "-m", "-p", self.service_daemon_pidfile(),
                        "-x", shutil.which("runsvdir") or "runsvdir", "-d", self.prefix, "--", env["SVDIR"]],
                       env=env, check=True, capture_output=True)
        self.services_started = True
        time.sleep(5)

    def stop_services(self) -> None:
        if not self.services_started:
            return
        self.sv("down")
        self.run("start-stop-daemon", "-K", "-s", "1", "-o", "-p", self.service_daemon_pidfile(), check=False)
        time.sleep(3)
        for supervise in Path(self.prefix, "var/service").glob("*/supervise"):
            for directory in (supervise, supervise.parent / "log" / "supervise"):
                with contextlib.suppress(OSError, ValueError):
                    os.kill(int((directory / "pid").read_text()), signal.SIGKILL)
        self.services_started = False

    def service_pid(self) -> int | None:
        status = self.sv("status")  # "run: DIR: (pid N) Ns; ..."
        try:
            return int(status.split("(pid ", 1)[1].split(")", 1)[0])
        except (IndexError, ValueError):
            return None

    def restart_service(self) -> None:
        """``sv restart``, then wait for another pid. Under qemu-user one run's
        restart once never reached the service (no SIGTERM arrived: the server
        logs its stop, and a second ``sv restart`` worked at once): a restart
        that has not replaced the pid within a minute is sent again, and the
        report says so (``restarts``)."""
        before = self.service_pid()
        for attempt in range(1, 3):
            self.sv("restart")
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and self.service_pid() in (before, None):
                time.sleep(2)
            if self.service_pid() not in (before, None):
                self.report["restarts"] = attempt
                return
        self.report["restarts"] = "the pid never changed"

    def service_environment(self) -> dict[str, str]:
        """The running service's environment (under qemu-user, the emulated process's own)."""
        pid = self.service_pid()
        try:
            raw = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            return {}
        return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)

    def chat(self, port: int, version: str) -> dict[str, object]:
        """A greedy chat completion, once the service of ``version`` has its model loaded."""
        report: dict[str, object] = {}
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as response:
                    health = json.load(response)
                report["version"] = health.get("version")
                report["model"] = health.get("model", {}).get("name")
                if health.get("model", {}).get("state") == "loaded" and report["version"] == version:
                    break
            except OSError:
                pass
            time.sleep(2)
        body = json.dumps({"model": report.get("model"), "temperature": 0, "max_tokens": 24,
                           "messages": [{"role": "user", "content": "Who are you?"}]}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=600) as response:
                report["answer"] = json.load(response)["choices"][0]["message"]["content"]
        except OSError as exc:
            report["error"] = str(exc)
        return report

    def main(self) -> None:
        self.base_system()
        base_files = self.files()
        old, new = (sorted(self.debs.glob(f"{ENGINE}_*_*.deb"))[i].name.split("_")[1] for i in (0, -1))
        self.report["versions"] = {"old": old, "new": new}
        self.expect(old != new, f"one {ENGINE} version only: {old}")

        # 1. install: the older python-mnn-engine with mnn, then the backend subpackages
        install = self.dpkg("-i", self.deb("mnn"), self.deb(ENGINE, old))
        self.report["install"] = install.stdout.splitlines()[-6:]
        for name in ("mnn", ENGINE):
            self.expect(self.status(name).startswith("install ok installed"), f"{name}: {self.status(name)}")
        conffiles = self.run("dpkg-query", f"--admindir={self.admindir}", "-W", "-f=${Conffiles}", ENGINE).stdout
        self.report["conffiles"] = [line.split()[0] for line in conffiles.splitlines() if line.strip()]
        for path in ("etc/mnn-engine/serve.env", f"var/service/{SERVICE}/run", f"var/service/{SERVICE}/down",
                     f"var/service/{SERVICE}/log/run"):
            self.expect(f"{self.prefix}/{path}" in self.report["conffiles"], f"{path} is not a conffile")
        deps = self.run(f"{self.prefix}/bin/python", "-c", "import tornado, prometheus_client; print('ok')",
                        check=False)
        self.expect(deps.stdout.strip() == "ok", f"the postinst did not pip-install the runtime deps: {deps.stderr}")
        self.report["probe_without_backends"] = self.probe(["mnn", ENGINE])
        self.dpkg("-i", self.deb("mnn-backend-opencl"), self.deb("mnn-backend-vulkan"))
        self.report["probe_with_backends"] = self.probe(["mnn", "mnn-backend-opencl", "mnn-backend-vulkan", ENGINE])

        # 2. the user's settings, the service under termux-services' runsvdir
        env_file = Path(self.prefix, "etc/mnn-engine/serve.env")
        edited = env_file.read_text().replace("MNN_ENGINE_MODEL=\n", f"MNN_ENGINE_MODEL={self.model}\n")
        edited = edited.replace("MNN_ENGINE_PORT=8081", f"MNN_ENGINE_PORT={PORT}")
        env_file.write_text(edited)
        self.start_services()
        self.report["sv_status_down"] = self.sv("status")
        self.expect(self.sv("status").startswith("down"), f"the service ran before sv up: {self.sv('status')}")
        self.sv("up")
        served = self.chat(PORT, old)
        self.report["service_old"] = served
        self.expect(SCRIPTED_ANSWER in str(served.get("answer")), f"the service ({old}) did not answer: {served}")
        log = Path(self.prefix, "var/log/sv", SERVICE, "current")
        self.expect(log.is_file() and str(PORT) in log.read_text(errors="replace"),
                    "svlogger's log has no line of the service's")
        environment = self.service_environment()
        self.report["service_home"] = environment.get("HOME")
        self.report["home_after_service"] = sorted(str(p.relative_to(self.home)) for p in Path(self.home).rglob("*")
                                                   if p.is_dir())[:20]
        self.expect(environment.get("HOME") == self.home, f"the service's HOME is {environment.get('HOME')!r}, "
                    f"not the Termux home {self.home}")

        # 3. upgrade over it
        upgrade = self.dpkg("-i", "--force-confold", self.deb(ENGINE, new))
        self.report["upgrade"] = upgrade.stdout.splitlines()[-6:]
        self.expect(self.status(ENGINE) == f"install ok installed {new}", f"after the upgrade: {self.status(ENGINE)}")
        self.expect(env_file.read_text() == edited, "the upgrade changed the user's serve.env")
        dist = Path(f"{env_file}.dpkg-dist")
        self.expect(dist.is_file() and dist.read_text() != edited, "no serve.env.dpkg-dist with the new defaults")
        self.restart_service()
        served = self.chat(PORT, new)
        self.report["service_new"] = served
        self.expect(SCRIPTED_ANSWER in str(served.get("answer")), f"the service ({new}) did not answer: {served}")
        self.expect(served.get("version") == new, f"the restarted service runs {served.get('version')}, not {new}")
        self.stop_services()

        # 4. removal: the conffiles stay until the purge
        packages = ["mnn-backend-opencl", "mnn-backend-vulkan", ENGINE, "mnn"]
        self.report["remove"] = self.dpkg("-r", *packages).stdout.splitlines()[-6:]
        self.expect(self.status(ENGINE).startswith("deinstall ok config-files"), f"removed: {self.status(ENGINE)}")
        left = sorted(self.files() - base_files)
        self.report["left_after_remove"] = self.summary(left)
        unexpected = [f for f in left if not self.owned_elsewhere(f)
                      and f not in {c.removeprefix(f"{self.prefix}/") for c in self.report["conffiles"]}
                      and f != "etc/mnn-engine/serve.env.dpkg-dist"]
        self.expect(not unexpected, f"left behind by dpkg -r: {unexpected}")
        self.expect(env_file.read_text() == edited, "dpkg -r did not keep the user's serve.env")
        self.dpkg("-P", *packages)
        left = sorted(self.files() - base_files)
        self.report["left_after_purge"] = self.summary(left)
        unexpected = [f for f in left if not self.owned_elsewhere(f)]
        self.expect(not unexpected, f"left behind by dpkg -P: {unexpected}")
        self.expect(self.status(ENGINE) == "unknown" or "not-installed" in self.status(ENGINE),
                    f"purged: {self.status(ENGINE)}")

    def summary(self, files: list[str]) -> dict[str, object]:
        """Files left under the prefix: the packages' own one by one, pip's by distribution,
        the rest by directory."""
        site = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages/"
        report: dict[str, object] = {"pip-installed": sorted({f[len(site):].split("/")[0] for f in files
                                                              if f.startswith(site) and ".dist-info/" in f}),
                                     "runit and log state": sorted({f.rsplit("/", 1)[0] for f in files
                                                                    if f.startswith(("var/log/", "var/service/"))
                                                                    and self.owned_elsewhere(f)})}
        report["the packages' files"] = [f for f in files if not self.owned_elsewhere(f)]
        return report

    def owned_elsewhere(self, path: str) -> bool:
        """What dpkg rightly leaves: what pip installed for the postinst, the service's logs and
        runsv's state (supervise/: runit writes it beside the run script, no package owns it) and
        service-daemon's pid file."""
        site = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages/"
        service = f"var/service/{SERVICE}/"
        return path.startswith((f"var/log/sv/{SERVICE}/", f"{service}supervise/", f"{service}log/supervise/",
                                "var/run/service-daemon.pid")) or (
            path.startswith(site) and not path.startswith((f"{site}mnn_engine/", f"{site}mnn_engine-")))


def main() -> None:
    device = Device(sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4])
    try:
        device.main()
    except Exception as exc:  # the report says where it stopped
        device.problems.append(f"stopped: {exc}")
    finally:
        device.stop_services()
    device.report["problems"] = device.problems
    print(json.dumps(device.report))


if __name__ == "__main__":
    main()
