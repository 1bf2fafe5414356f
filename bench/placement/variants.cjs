// Synthetic stand-ins for the openb traces that are not published with the shared data
// (gpuspec20/25/33, gpushare20/60/80/100, multigpu30/50, cpu100/200/250), built from the public
// five with a fixed seed, so `default` can be checked against FGD on traces it was not tuned on.
// They follow each family's idea, not Alibaba's exact recipe:
//   gpuspecN   N % of the GPU pods restricted to GPU models, the restrictions drawn from
//              gpuspec10's (which restricts 10 %);
//   gpushareN  N % of the single-GPU pods ask a share, the shares drawn from the default trace's;
//   multigpuN  pods of several GPUs ask N % of all GPU demand, shapes drawn from multigpu20's;
//   cpuN       CPU-only pods N/50 times as many as cpu050's, drawn from the default trace's.
//
//   node bench/placement/variants.cjs DATA_DIR OUT_DIR   (writes OUT_DIR/openb_pod_list_*.csv)
"use strict";
const fs = require("fs");
const [, , dataDir, outDir] = process.argv;
if (!dataDir || !outDir) {
  console.error("usage: variants.cjs DATA_DIR OUT_DIR");
  process.exit(2);
}

// A 64-bit linear congruential generator: the same traces on every machine.
function generator(seed) {
  let s = BigInt(seed);
  return () => {
    s = (s * 6364136223846793005n + 1442695040888963407n) & ((1n << 64n) - 1n);
    return Number(s >> 11n) / 2 ** 53;
  };
}
const pick = (next, xs) => xs[Math.floor(next() * xs.length)];
const takeRandom = (next, xs) => xs.splice(Math.floor(next() * xs.length), 1)[0];

function read(trace) {
  const lines = fs.readFileSync(`${dataDir}/openb_pod_list_${trace}.csv`, "utf8").trim().split("\n");
  const head = lines[0].split(",");
  const rows = lines.slice(1).map((line) => {
    const fields = line.split(",");
    return Object.fromEntries(head.map((h, i) => [h, fields[i] ?? ""]));
  });
  return {head, rows};
}
function write(name, {head, rows}) {
  const h = head.includes("gpu_spec") ? head : [...head.slice(0, 5), "gpu_spec"];
  const text = [h.join(","), ...rows.map((r) => h.map((k) => r[k] ?? "").join(","))].join("\n");
  fs.writeFileSync(`${outDir}/openb_pod_list_${name}.csv`, text + "\n");
}
const copy = (t) => ({head: t.head, rows: t.rows.map((r) => ({...r}))});
const gpus = (r) => +r.num_gpu;
const demand = (r) => +r.num_gpu * +r.gpu_milli;

const spec10 = read("gpuspec10");
const restrictions = spec10.rows.filter((r) => r.gpu_spec).map((r) => r.gpu_spec);
for (const n of [20, 25, 33]) {
  const t = copy(spec10), next = generator(n);
  const gpuPods = t.rows.filter((r) => gpus(r) > 0);
  const free = gpuPods.filter((r) => !r.gpu_spec);
  let restricted = gpuPods.length - free.length;
  while (restricted < Math.round((gpuPods.length * n) / 100)) {
    takeRandom(next, free).gpu_spec = pick(next, restrictions);
    ++restricted;
  }
  write(`gpuspec${n}`, t);
}

const base = read("default");
const shares = base.rows.filter((r) => gpus(r) === 1 && +r.gpu_milli < 1000).map((r) => r.gpu_milli);
for (const n of [20, 60, 80, 100]) {
  const t = copy(base), next = generator(100 + n);
  const single = t.rows.filter((r) => gpus(r) === 1);
  const want = Math.round((single.length * n) / 100);
  const sharing = single.filter((r) => +r.gpu_milli < 1000);
  const whole = single.filter((r) => +r.gpu_milli >= 1000);
  while (sharing.length < want) {
    const r = takeRandom(next, whole);
    r.gpu_milli = pick(next, shares);
    sharing.push(r);
  }
  while (sharing.length > want) {
    const r = takeRandom(next, sharing);
    r.gpu_milli = "1000";
    whole.push(r);
  }
  write(`gpushare${n}`, t);
}

const multi20 = read("multigpu20");
const multiShapes = multi20.rows.filter((r) => gpus(r) > 1);
for (const n of [30, 50]) {
  const t = copy(multi20), next = generator(200 + n);
  const total = t.rows.reduce((a, r) => a + demand(r), 0);
  let multi = t.rows.filter((r) => gpus(r) > 1).reduce((a, r) => a + demand(r), 0);
  const whole = t.rows.filter((r) => gpus(r) === 1 && +r.gpu_milli >= 1000);
  let all = total;
  while (multi / all < n / 100 && whole.length > 0) {
    const r = takeRandom(next, whole), shape = pick(next, multiShapes);
    all -= demand(r);
    for (const k of ["num_gpu", "gpu_milli", "cpu_milli", "memory_mib"]) r[k] = shape[k];
    all += demand(r);
    multi += demand(r);
  }
  write(`multigpu${n}`, t);
}

const cpu050 = read("cpu050");
const cpuOnly = base.rows.filter((r) => gpus(r) === 0);
const cpu050Count = cpu050.rows.filter((r) => gpus(r) === 0).length;
for (const n of [100, 200, 250]) {
  const t = {head: cpu050.head, rows: cpu050.rows.filter((r) => gpus(r) > 0).map((r) => ({...r}))};
  const next = generator(300 + n);
  const want = Math.round((cpu050Count * n) / 50);
  for (let i = 0; i < want; ++i) t.rows.push({...pick(next, cpuOnly), name: `synthetic-cpu-${i}`});
  write(`cpu${n}`, t);
}
