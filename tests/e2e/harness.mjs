// Shared helpers for end-to-end tests: start `purser serve` as a real process on a free port,
// and launch the machine's Chromium through playwright-core.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export const purserBinary = process.env.PURSER_BINARY ?? "build/debug/purser";

// Starts a process and resolves with the URL it prints in "listening on URL".
function startListening(args, env = {}) {
  const child = spawn(purserBinary, args, {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, ...env },
  });
  let stderr = "";
  child.stderr.on("data", (d) => (stderr += d));
  const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })));
  const url = new Promise((resolve, reject) => {
    let out = "";
    const timer = setTimeout(() => reject(new Error(`${args[0]} did not start:\n${stderr}`)), 60_000);
    child.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/listening on (http\S+)/);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    child.on("exit", () => reject(new Error(`${args.join(" ")} exited before listening:\n${stderr}`)));
  });
  return { child, exited, url, stderr: () => stderr };
}

// Starts `purser sim KIND` (llm: a model server; dcgm: a DCGM exporter whose readings
// POST /sim/gpus sets) with extra flags; resolves with { url, stop() }.
async function startSimulator(kind, flags) {
  const p = startListening(["sim", kind, "--listen", "127.0.0.1:0", ...flags]);
  const url = await p.url;
  return {
    url,
    async stop() {
      p.child.kill("SIGTERM");
      await p.exited;
    },
  };
}

export const startSim = (flags = []) => startSimulator("llm", flags);
export const startDcgmSim = (flags = []) => startSimulator("dcgm", flags);

// Starts purser with `configText` (a YAML document without `listen`) and resolves once it
// listens. Returns { url, process, dir, stop({ keep }), stderr() }. `options.dir` starts it on
// the data of an earlier one stopped with keep: a replica's restart.
export async function startPurser(configText = "", env = {}, options = {}) {
  const dir = options.dir ?? mkdtempSync(join(tmpdir(), "purser-e2e-"));
  writeFileSync(join(dir, "purser.yaml"), `listen: 127.0.0.1:0\n${configText}`);
  const child = spawn(purserBinary, ["serve", "--config", join(dir, "purser.yaml"), "--data", join(dir, "var")], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, ...env },
  });
  let stderr = "";
  child.stderr.on("data", (d) => (stderr += d));
  const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })));
  const url = await new Promise((resolve, reject) => {
    let out = "";
    const timer = setTimeout(() => reject(new Error(`purser did not start:\n${stderr}`)), 60_000);
    child.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/listening on (http\S+)/);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    child.on("exit", () => reject(new Error(`purser exited before listening:\n${stderr}`)));
  });
  return {
    url,
    process: child,
    dir,
    stderr: () => stderr,
    async stop({ keep = false } = {}) {
      child.kill("SIGTERM");
      const result = await exited;
      if (!keep) rmSync(dir, { recursive: true, force: true });
      return result;
    },
  };
}

export async function launchBrowser() {
  const { chromium } = await import("playwright-core");
  return chromium.launch({
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    args: [
      "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
    ],
  });
}
