// The words of an incident case: the log lines and events that follow from what the world's
// physics derived (narrate), and the case file itself (render).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>

#include "sim/incident_world.h"

namespace purser::sim::incident {

namespace {

std::string vllmStats(const Replica& r, int64_t t, size_t k) {
  if (r.v1) {
    return fmt::format(
        "(APIServer pid=1) INFO {} [loggers.py:123] Engine 000: Avg prompt throughput: {:.1f} "
        "tokens/s, Avg generation throughput: {:.1f} tokens/s, Running: {} reqs, Waiting: {} "
        "reqs, GPU KV cache usage: {:.1f}%, Prefix cache hit rate: {:.1f}%",
        vllmTime(t), r.prompt_tps[k], r.gen_tps[k], static_cast<int64_t>(r.running[k]),
        static_cast<int64_t>(r.waiting[k]), r.kv[k] * 100, r.prefix_rate[k] * 100);
  }
  return fmt::format(
      "INFO {} metrics.py:455] Avg prompt throughput: {:.1f} tokens/s, Avg generation throughput: "
      "{:.1f} tokens/s, Running: {} reqs, Swapped: 0 reqs, Pending: {} reqs, GPU KV cache usage: "
      "{:.1f}%, CPU KV cache usage: 0.0%.",
      vllmTime(t), r.prompt_tps[k], r.gen_tps[k], static_cast<int64_t>(r.running[k]),
      static_cast<int64_t>(r.waiting[k]), r.kv[k] * 100);
}

// What each outside provider answers when it fails, as its API writes it.
std::string errorBody(const std::string& provider, int status, Rng& rng) {
  if (provider == "openai") {
    return status == 429
               ? R"({"error":{"message":"Rate limit reached for requests","type":"requests","param":null,"code":"rate_limit_exceeded"}})"
               : R"({"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}})";
  }
  if (provider == "anthropic") {
    if (status == 429) {
      return R"({"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}})";
    }
    return rng.chance(0.5)
               ? R"({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}})"
               : R"({"type":"error","error":{"type":"api_error","message":"Internal server error"}})";
  }
  if (provider == "azure-eu") {
    return status == 429
               ? R"({"error":{"code":"429","message":"Requests to the ChatCompletions_Create Operation have exceeded call rate limit. Please retry after 30 seconds."}})"
               : R"({"error":{"code":"InternalServerError","message":"The service is temporarily unable to process your request. Please try again later."}})";
  }
  if (provider == "bedrock-us") {
    return status == 429
               ? R"({"message":"Too many requests, please wait before trying again."})"
               : R"({"message":"Model has timed out in processing the request. Try your request again."})";
  }
  if (provider == "vertex-eu") {
    return status == 429
               ? R"({"error":{"code":429,"message":"Quota exceeded for aiplatform.googleapis.com/generate_content_requests_per_minute_per_project_per_base_model.","status":"RESOURCE_EXHAUSTED"}})"
               : R"({"error":{"code":503,"message":"The service is currently unavailable.","status":"UNAVAILABLE"}})";
  }
  return status == 429
             ? R"({"error":{"message":"You have exceeded your rate limit","type":"rate_limit_exceeded"}})"
             : R"({"error":{"message":"Internal server error","type":"server_error"}})";
}

std::string logfmtQuote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

}  // namespace

void narrate(World& w) {
  Rng rng = w.rng.fork("narrate");
  const int S = w.time.samples;
  const int step = w.time.step;

  // vLLM's periodic stats lines, and the RECOMPUTE warning V0 prints every 50 preemptions.
  for (auto& r : w.replicas) {
    int last = std::min(S, r.down_from);
    for (int k = 0; k < last; ++k) {
      if ((k + r.log_phase) % r.log_every != 0) continue;
      w.log(w.time.at(k), r.name, vllmStats(r, w.time.at(k), static_cast<size_t>(k)));
    }
    if (r.v1 || !r.prints_recompute) continue;
    double cum = r.preemptions0;
    for (int k = 1; k < last; ++k) {
      double before = cum;
      cum += r.preemptions[static_cast<size_t>(k)];
      int lines = 0;
      int64_t lo = static_cast<int64_t>(std::floor(before)) + 1;
      int64_t hi = static_cast<int64_t>(std::floor(cum));
      // vLLM warns at the 1st, 51st, 101st ... preemption of the process.
      for (int64_t n = lo + ((1 - lo) % 50 + 50) % 50; n <= hi && lines < 3; n += 50) {
        double frac = (static_cast<double>(n) - before) / std::max(1e-9, cum - before);
        int64_t t = w.time.at(k - 1) + static_cast<int64_t>(std::clamp(frac, 0.0, 0.999) * step);
        w.log(t, r.name,
              fmt::format("WARNING {} scheduler.py:1560] Sequence group chatcmpl-{} is preempted "
                          "by PreemptionMode.RECOMPUTE mode because there is not enough KV cache "
                          "space. This can affect the end-to-end performance. Increase "
                          "gpu_memory_utilization or tensor_parallel_size to provide more KV "
                          "cache memory. total_num_cumulative_preemption={}",
                          vllmTime(t), rng.hex(32), n));
        ++lines;
      }
    }
  }

  // Training and batch jobs: their step lines while they run.
  for (auto& wl : w.workloads) {
    if (!wl.logs || wl.node < 0) continue;
    const GpuType& type = w.typeOf(wl.node);
    double step_no = static_cast<double>(wl.step0);
    double loss = wl.loss;
    double mfu = rng.range(28, 46);
    for (int k = 0; k < S; ++k) {
      auto ks = static_cast<size_t>(k);
      if (wl.state[ks] != kRunning) continue;
      double slow = std::max(1.0, wl.slow[ks]);
      double busy = std::clamp(wl.util_scale[ks], 0.0, 1.0);
      if (k > 0 && wl.state[ks - 1] == kRunning) {
        step_no += step / (wl.step_time * slow) * busy;
      }
      loss = std::max(0.8, loss - rng.range(0.0, 0.002));
      if ((k + wl.log_phase) % wl.log_every != 0 || busy < 0.05) continue;
      int64_t t = w.time.at(k);
      int ms = rng.intIn(0, 999);
      double shown_loss = loss + rng.range(-0.04, 0.04);
      double tps = wl.tokens_per_s / slow * rng.jitter(0.015);
      if (wl.titan_logs) {
        double mem = (wl.fb_mib + wl.fb_extra[ks]) / 1024 * 0.96;
        double pct = mem / (type.total_mib / 1024) * 100;
        double m = mfu / slow;
        w.log(t, wl.ns + "/" + wl.name,
              fmt::format("[rank0]:[titan] {} - root - INFO - step: {:5d}  loss: {:7.4f}  memory: "
                          "{:5.2f}GiB({:5.2f}%)  tps: {}  tflops: {:.2f}  mfu: {:.2f}%",
                          pyTime(t, ms), static_cast<int64_t>(step_no), shown_loss, mem, pct,
                          withThousands(static_cast<int64_t>(tps)), m * 9.89, m));
      } else {
        w.log(
            t, wl.ns + "/" + wl.name,
            fmt::format("{} INFO train.py:{} step={} loss={:.4f} lr={:.2e} step_time={:.2f}s "
                        "tokens/s={}",
                        pyTime(t, ms), wl.train_line, static_cast<int64_t>(step_no), shown_loss,
                        wl.lr, wl.step_time * slow * rng.jitter(0.02), static_cast<int64_t>(tps)));
      }
    }
  }

  // Purser's own warnings for what failed at the gateway, and its cooldown events.
  std::map<std::string, int64_t> last_cooldown;
  for (const auto& f : w.failures) {
    const auto& route = w.routes[static_cast<size_t>(f.route)];
    double carry = 0;
    int consecutive = 0;
    for (int k = 1; k < S; ++k) {
      double n = f.count[static_cast<size_t>(k)];
      carry += n;
      if (carry < 1) continue;
      int lines = carry >= 40 ? 3 : carry >= 8 ? 2 : 1;
      carry = 0;
      for (int i = 0; i < lines; ++i) {
        // (A refused budget comes after the ledger's hard alert, a few seconds into the interval.)
        int64_t t =
            w.time.at(k - 1) + rng.intIn(f.kind == "budget" ? std::min(8, step - 1) : 1, step - 1);
        int ms = rng.intIn(0, 999);
        std::string head = fmt::format("ts={} level=warn component=gateway", isoTimeMillis(t, ms));
        std::string line;
        if (f.kind == "budget") {
          std::string who = route.refused_principals.empty() ? "principal=unknown"
                                                             : rng.pick(route.refused_principals);
          line = fmt::format(
              "{} msg=\"budget exceeded\" route={} {} status=429 "
              "type=insufficient_quota",
              head, route.name, who);
        } else if (f.kind == "connect") {
          bool provider = w.findProvider(f.target) >= 0;
          // A provider's endpoint resolves to a handful of addresses.
          uint64_t h = fnv1a(f.target) + static_cast<uint64_t>(rng.intIn(0, 2));
          std::string err = provider
                                ? fmt::format("dial tcp {}.{}.{}.{}:443: i/o timeout", 20 + h % 160,
                                              (h >> 8) % 250, (h >> 16) % 250, 1 + (h >> 24) % 250)
                                : "connect: connection refused";
          line = fmt::format(
              "{} msg=\"upstream connect failed\" route={} target={} error={} "
              "attempt={}",
              head, route.name, f.target, logfmtQuote(err), rng.intIn(1, 2));
        } else if (f.kind == "429") {
          const auto& p = w.providers[static_cast<size_t>(w.findProvider(f.target))];
          std::string fallback;
          if (route.fallback >= 0 && route.fallback != w.findProvider(f.target)) {
            fallback = " fallback=" + w.providers[static_cast<size_t>(route.fallback)].name;
          }
          line = fmt::format(
              "{} msg=\"upstream returned 429\" route={} target={} status=429 "
              "retry_after={} x_ratelimit_remaining_requests=0 "
              "x_ratelimit_remaining_tokens={}{}",
              head, route.name, f.target, p.retry_after, rng.chance(0.5) ? 0 : rng.intIn(100, 9000),
              fallback);
        } else if (f.kind == "timeout") {
          double limit = route.timeout_s;
          line = fmt::format(
              "{} msg=\"upstream timeout\" route={} target={} timeout={}s "
              "elapsed={:.1f}s attempt=1",
              head, route.name, f.target, static_cast<int>(limit), limit + rng.range(0.0, 0.2));
        } else {
          std::string body;
          if (f.status == 404) {
            body = fmt::format(
                R"({{"object":"error","message":"The model `{}` does not exist.","type":"NotFoundError","param":null,"code":404}})",
                route.requested_model);
          } else {
            body = errorBody(f.target, f.status, rng);
          }
          line = fmt::format(
              "{} msg=\"upstream error\" route={} target={} attempt={} status={} "
              "body={}",
              head, route.name, f.target, rng.intIn(1, 2), f.status, logfmtQuote(body));
        }
        w.log(t, "purser", std::move(line));
      }
      // Cooldowns: a target failing again and again is set aside for 30 s.
      if (f.kind == "budget" || f.kind == "4xx") continue;
      consecutive = n >= 5 ? rng.intIn(5, static_cast<int>(std::min(n, 60.0))) : 0;
      std::string object = route.name + "/" + f.target;
      int64_t t = w.time.at(k - 1) + rng.intIn(1, step - 1);
      if (consecutive >= 5 &&
          (last_cooldown.count(object) == 0 || t - last_cooldown[object] > 150)) {
        last_cooldown[object] = t;
        std::string why = f.kind == "connect" && w.findProvider(f.target) < 0
                              ? " (connect: connection refused)"
                              : "";
        w.events.push_back(
            {t, "gateway", "target.cooldown", "", object, "",
             fmt::format("{} consecutive failures{}; cooling down for 30s", consecutive, why)});
      }
    }
  }

  // Wallet alerts as the ledger raises them: at the alert threshold and at the hard limit.
  for (const auto& wallet : w.wallets) {
    bool alerted = wallet.ratio.empty() || wallet.ratio[0] >= 0.75;
    bool hard = wallet.ratio.empty() || wallet.ratio[0] >= 1.0;
    for (int k = 1; k < S; ++k) {
      double v = wallet.ratio[static_cast<size_t>(k)];
      int64_t t = w.time.at(k) - rng.intIn(1, step - 1);
      if (!alerted && v >= 0.75) {
        alerted = true;
        w.audit(t, "wallet.alert", "system", wallet.scope,
                fmt::format("spent 75% of the {:.2f} USD {} limit (alert threshold)",
                            wallet.limit_usd, wallet.period));
      }
      if (!hard && v >= 1.0) {
        hard = true;
        t = w.time.at(k - 1) + rng.intIn(1, std::min(6, step - 1));
        w.audit(t, "wallet.alert", "system", wallet.scope,
                fmt::format("spent 100% of the {:.2f} USD {} limit (hard); new requests are "
                            "rejected",
                            wallet.limit_usd, wallet.period == "monthly" ? "monthly" : "daily"));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------

namespace {

void appendValue(std::string& out, double v, Fmt f) {
  auto it = std::back_inserter(out);
  if (f == Fmt::kInt || !std::isfinite(v)) {
    fmt::format_to(it, "{}", static_cast<int64_t>(std::llround(v)));
    return;
  }
  size_t at = out.size();
  switch (f) {
    case Fmt::kFixed1:
      fmt::format_to(it, "{:.1f}", v);
      break;
    case Fmt::kFixed2:
      fmt::format_to(it, "{:.2f}", v);
      break;
    case Fmt::kFixed3:
      fmt::format_to(it, "{:.3f}", v);
      break;
    default:
      fmt::format_to(it, "{:.4f}", v);
      break;
  }
  // Trailing zeros say nothing: 0.4100 -> 0.41, 12.000 -> 12.
  if (out.find('.', at) != std::string::npos) {
    while (out.back() == '0') out.pop_back();
    if (out.back() == '.') out.pop_back();
  }
  if (out.size() - at == 2 && out[at] == '-' && out[at + 1] == '0') out.erase(at, 1);
}

std::string gpuList(const std::vector<int>& gpus) {
  std::string s = "[";
  for (size_t i = 0; i < gpus.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(gpus[i]);
  }
  return s + "]";
}

}  // namespace

std::string render(const World& w, const std::string& case_name, const Question& question,
                   const std::string& cause, const Subject& subject) {
  std::string out;
  size_t points = 0;
  for (const auto& s : w.out) points += static_cast<size_t>(s.last - s.first);
  out.reserve(points * 96 + w.logs.size() * 220 + w.events.size() * 200 + 8192);
  auto it = std::back_inserter(out);
  const auto q = [](const std::string& s) { return yamlQuote(s); };

  fmt::format_to(it, "name: {}\n", q(case_name));
  fmt::format_to(it, "question: {{kind: {}, name: {}, symptom: {}}}\n", q(question.kind),
                 q(question.name), q(question.symptom));
  fmt::format_to(it, "window: {{start: {}, end: {}}}\n", q(isoTime(w.time.start)),
                 q(isoTime(w.time.end())));
  out += "inventory:\n  nodes:\n";
  for (const auto& n : w.nodes) {
    fmt::format_to(it, "    - {{name: {}, gpus: {}, gpu_type: {}}}\n", q(n.name), n.gpus.size(),
                   q(gpuTypes()[static_cast<size_t>(n.type)].name));
  }
  out += w.replicas.empty() ? "  deployments: []\n" : "  deployments:\n";
  for (const auto& r : w.replicas) {
    fmt::format_to(it, "    - {{name: {}, route: {}, provider: {}, node: {}, gpus: {}}}\n",
                   q(r.name), q(r.route), q(r.pool), q(w.nodes[static_cast<size_t>(r.node)].name),
                   gpuList(r.gpus));
  }
  out += w.workloads.empty() ? "  workloads: []\n" : "  workloads:\n";
  for (const auto& wl : w.workloads) {
    if (wl.node < 0) {
      fmt::format_to(it, "    - {{namespace: {}, name: {}, queue: {}, node: null, gpus: []}}\n",
                     q(wl.ns), q(wl.name), q(wl.queue));
    } else {
      fmt::format_to(it, "    - {{namespace: {}, name: {}, queue: {}, node: {}, gpus: {}}}\n",
                     q(wl.ns), q(wl.name), q(wl.queue),
                     q(w.nodes[static_cast<size_t>(wl.node)].name), gpuList(wl.gpus));
    }
  }
  out += "  teams:\n";
  for (const auto& t : w.teams) {
    fmt::format_to(it, "    - {{name: {}, tenant: {}}}\n", q(t.name), q(t.tenant));
  }

  out += "metrics: |\n";
  for (const auto& s : w.out) {
    std::string head = "  " + s.name + s.labels + " ";
    for (int k = s.first; k < s.last; ++k) {
      out += head;
      appendValue(out, s.values[static_cast<size_t>(k)], s.fmt);
      out.push_back(' ');
      fmt::format_to(it, "{}\n", w.time.at(k));
    }
  }

  std::vector<const Event*> events;
  for (const auto& e : w.events) {
    if (e.t >= w.time.start && e.t <= w.time.end()) events.push_back(&e);
  }
  std::stable_sort(events.begin(), events.end(),
                   [](const Event* a, const Event* b) { return a->t < b->t; });
  out += events.empty() ? "events: []\n" : "events:\n";
  for (const Event* e : events) {
    fmt::format_to(it, "  - {{time: {}, source: {}, kind: {}", q(isoTime(e->t)), q(e->source),
                   q(e->kind));
    if (!e->actor.empty()) fmt::format_to(it, ", actor: {}", q(e->actor));
    fmt::format_to(it, ", object: {}", q(e->object));
    if (!e->reason.empty()) fmt::format_to(it, ", reason: {}", q(e->reason));
    fmt::format_to(it, ", message: {}}}\n", q(e->message));
  }

  std::vector<const LogLine*> logs;
  for (const auto& l : w.logs) {
    if (l.t >= w.time.start && l.t <= w.time.end()) logs.push_back(&l);
  }
  std::stable_sort(logs.begin(), logs.end(),
                   [](const LogLine* a, const LogLine* b) { return a->t < b->t; });
  out += logs.empty() ? "logs: []\n" : "logs:\n";
  for (const LogLine* l : logs) {
    fmt::format_to(it, "  - {{time: {}, source: {}, line: {}}}\n", q(isoTime(l->t)), q(l->source),
                   q(l->line));
  }

  out += "expected:\n";
  fmt::format_to(it, "  cause: {}\n", cause);
  if (!subject.kind.empty()) {
    fmt::format_to(it, "  subject: {{kind: {}, name: {}}}\n", q(subject.kind), q(subject.name));
  }
  return out;
}

}  // namespace purser::sim::incident
