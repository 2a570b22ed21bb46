"""The KV benchmarks' processes: a scratch directory, the servers and
helpers a benchmark starts, and their cleanup on every way out."""
import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import time


class Run:
    def __init__(self, name):
        self.name = name
        self.work = tempfile.mkdtemp(prefix=f"inferd-{name}.")
        self.procs = []
        atexit.register(self.cleanup)  # also when a benchmark dies of an exception

    def path(self, *parts):
        return os.path.join(self.work, *parts)

    def spawn(self, cmd, **kw):
        p = subprocess.Popen(cmd, **kw)
        self.procs.append(p)
        return p

    def cleanup(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(self.work, ignore_errors=True)

    def fail(self, msg):
        print(f"{self.name}: {msg}", file=sys.stderr)
        self.cleanup()
        sys.exit(1)

    def wait_port(self, portf, proc, logf, tries=600):
        """The port a process wrote to portf once it listens; fails the run
        (with the end of its log) when it exits or takes a minute."""
        for _ in range(tries):
            if os.path.exists(portf) and os.path.getsize(portf) > 0:
                return int(open(portf).read())
            if proc.poll() is not None:
                break
            time.sleep(0.1)
        self.fail(f"{os.path.basename(logf)}: did not start:\n" + open(logf).read()[-2000:])

    def q05_model(self, inferd, given=None):
        """The model file: given, else a random-weight qwen2.5-0.5b-shaped
        q8_0 file made here with `inferd model make`."""
        if given:
            return given
        model = self.path("q05-q8_0.gguf")
        subprocess.run([inferd, "model", "make", "--preset", "qwen2.5-0.5b", "--type", "q8_0",
                        "-o", model], check=True, stdout=subprocess.DEVNULL)
        return model

    def machine_line(self, model, note):
        """The header every figure needs: CPU, cores, kernel level, model."""
        cpu = "?"
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        isa = os.environ.get("INFERD_ISA", "auto")
        return (f"# {cpu}, {os.cpu_count()} cores, INFERD_ISA={isa}, "
                f"model {os.path.basename(model)}, {note}")

    def serve(self, inferd, model, name, flags):
        """Starts `inferd serve` on a free port with its own data directory
        and log (both named after name), flags after the common ones;
        returns (process, port) once it listens."""
        portf, logf = self.path(name + ".port"), self.path(name + ".log")
        if os.path.exists(portf):
            os.unlink(portf)
        cmd = [inferd, "serve", "-m", model, "--name", "m", "--port", "0", "--port-file", portf,
               "--data-dir", self.path("data-" + name)] + list(flags)
        p = self.spawn(cmd, stdout=open(logf, "a"), stderr=subprocess.STDOUT)
        return p, self.wait_port(portf, p, logf)
