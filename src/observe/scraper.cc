#include "observe/scraper.h"

#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <atomic>
#include <deque>
#include <mutex>

#include "http/client.h"
#include "observe/prom_text.h"

namespace purser::observe {

namespace asio = boost::asio;

class Scraper::Impl : public std::enable_shared_from_this<Scraper::Impl> {
 public:
  Impl(asio::io_context& io, SeriesStore& store, http::MetricsRegistry& metrics, const Clock& clock,
       std::vector<ScrapeTarget> targets, std::function<void(const std::string&)> on_scrape,
       ScraperOptions options)
      : io_(io),
        store_(store),
        clock_(clock),
        targets_(targets.begin(), targets.end()),
        running_(targets_.size()),
        on_scrape_(std::move(on_scrape)),
        options_(options),
        client_(io, clientOptions(options), clock),
        up_(metrics.gaugeFamily("purser_scrape_up",
                                "1 when the target's last scrape succeeded, 0 when it failed.",
                                {"target"})),
        duration_(metrics.gaugeFamily("purser_scrape_duration_seconds",
                                      "How long the target's last scrape took.", {"target"})),
        samples_(metrics.gaugeFamily("purser_scrape_samples",
                                     "Samples kept from the target's last successful scrape.",
                                     {"target"})) {
    for (const auto& t : targets_) statuses_.push_back({.target = t.name});
    auto& series = metrics.gauge("purser_observe_series", "Series held in memory.");
    auto& bytes = metrics.gauge("purser_observe_memory_bytes",
                                "Bytes the series held in memory take (bounded by observe.*).");
    auto& dropped = metrics.gauge("purser_observe_refused_series",
                                  "New series refused because observe.max_series was reached.");
    // The store outlives the registry's collectors only as long as the Scraper does; the
    // collector reads through a weak pointer.
    std::weak_ptr<bool> alive = alive_;
    metrics.addCollector([alive, &store, &series, &bytes, &dropped] {
      if (alive.expired()) return;
      series.set(static_cast<double>(store.seriesCount()));
      bytes.set(static_cast<double>(store.memoryBytes()));
      dropped.set(static_cast<double>(store.droppedSeries()));
    });
  }

  static http::ClientOptions clientOptions(const ScraperOptions& o) {
    http::ClientOptions c;
    c.connect_timeout = std::chrono::seconds(2);
    c.max_response_bytes = o.max_body_bytes;
    // Many targets may share a host (replicas behind one address, exporters per node): keep
    // their connections rather than open one per scrape.
    c.max_idle_per_host = 64;
    c.user_agent = "purser-scraper";
    return c;
  }

  void start() {
    // On io_'s thread, where add() runs too.
    asio::post(io_, [self = shared_from_this()] {
      if (self->stopping_.load()) return;
      self->started_ = true;
      for (size_t i = 0; i < self->targets_.size(); ++i) self->spawn(i);
      asio::co_spawn(self->io_, sweeper(self), asio::detached);
    });
  }

  void spawn(size_t index) {
    running_[index].looping = true;
    asio::co_spawn(io_, loop(shared_from_this(), index), asio::detached);
  }

  // On io_'s thread: scrapes `t` from now on (again, at its new address, when known).
  void add(ScrapeTarget t) {
    if (stopping_.load()) return;
    for (size_t i = 0; i < targets_.size(); ++i) {
      if (targets_[i].name != t.name) continue;
      targets_[i].url = std::move(t.url);
      running_[i].active = true;
      if (started_ && !running_[i].looping) spawn(i);
      return;
    }
    targets_.push_back(std::move(t));
    running_.emplace_back();
    {
      std::lock_guard lock(status_mu_);
      statuses_.push_back({.target = targets_.back().name});
    }
    if (started_) spawn(targets_.size() - 1);
  }

  // On io_'s thread: no more scrapes of `name` (its loop ends after the one in flight).
  void remove(const std::string& name) {
    for (size_t i = 0; i < targets_.size(); ++i) {
      if (targets_[i].name == name) running_[i].active = false;
    }
  }

  void stop() {
    stopping_.store(true);
    // Wakes every loop now; each sees stopping_ and ends.
    asio::post(io_, [self = shared_from_this()] {
      std::lock_guard lock(self->timers_mu_);
      for (auto* t : self->timers_) t->cancel();
    });
  }

  static asio::awaitable<void> loop(std::shared_ptr<Impl> self, size_t index) {
    asio::steady_timer timer(co_await asio::this_coro::executor);
    self->track(&timer, true);
    while (!self->stopping_.load() && self->running_[index].active) {
      const MonoTime began = self->clock_.monotonic();
      co_await self->scrapeOnce(index);
      if (self->stopping_.load() || !self->running_[index].active) break;
      // The next one an interval after this one began, so a slow target is not scraped less.
      const Duration spent = self->clock_.monotonic() - began;
      const Duration interval = self->targets_[index].interval;
      timer.expires_after(spent < interval ? interval - spent : Duration(0));
      boost::system::error_code ec;
      co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    self->running_[index].looping = false;
    self->track(&timer, false);
  }

  static asio::awaitable<void> sweeper(std::shared_ptr<Impl> self) {
    asio::steady_timer timer(co_await asio::this_coro::executor);
    self->track(&timer, true);
    while (!self->stopping_.load()) {
      timer.expires_after(self->options_.sweep_interval);
      boost::system::error_code ec;
      co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      if (self->stopping_.load()) break;
      self->store_.sweep(unixMillis(self->clock_.now()));
    }
    self->track(&timer, false);
  }

  void track(asio::steady_timer* timer, bool add) {
    std::lock_guard lock(timers_mu_);
    if (add) {
      timers_.push_back(timer);
    } else {
      std::erase(timers_, timer);
    }
  }

  asio::awaitable<void> scrapeOnce(size_t index) {
    const ScrapeTarget& t = targets_[index];
    const MonoTime began = clock_.monotonic();
    const int64_t now_ms = unixMillis(clock_.now());
    http::ClientRequest req;
    req.url = t.url;
    req.timeout = t.timeout;
    req.headers.add("Accept", "text/plain;version=0.0.4;q=0.9,application/openmetrics-text;q=0.5");
    auto answer = co_await client_.request(std::move(req));
    Result<size_t> kept = fail(unavailable("not scraped"));
    if (!answer) {
      kept = fail(answer.error());
    } else if (answer->status != 200) {
      kept = fail(unavailable(fmt::format("it answered HTTP {}", answer->status)));
    } else {
      kept = write(t, answer->body, now_ms);
    }
    const double seconds = std::chrono::duration<double>(clock_.monotonic() - began).count();
    {
      std::lock_guard lock(status_mu_);
      ScrapeStatus& s = statuses_[index];
      s.last_attempt_ms = now_ms;
      s.duration_s = seconds;
      if (kept) {
        s.last_success_ms = now_ms;
        s.consecutive_failures = 0;
        s.last_error.clear();
        s.samples = *kept;
      } else {
        ++s.consecutive_failures;
        if (s.last_error != kept.error().message) {
          spdlog::warn("observe: scraping {} ({}) failed: {}", t.name, t.url, kept.error().message);
        }
        s.last_error = kept.error().message;
      }
    }
    up_.labels({t.name}).set(kept ? 1 : 0);
    duration_.labels({t.name}).set(seconds);
    if (kept) samples_.labels({t.name}).set(static_cast<double>(*kept));
    if (on_scrape_) on_scrape_(t.name);
  }

  // The lines of `body` a profile may keep: metadata and the samples of its families. Parsing
  // only these costs a fraction of parsing a server's whole exposition (a vLLM server writes
  // hundreds of families, Python's runtime among them); the lines dropped are not validated, and
  // are left empty so that an error's line number is still the server's.
  static std::string keptLines(std::string_view body, const EngineProfile& profile) {
    std::string out;
    out.reserve(body.size() / 2);
    size_t at = 0;
    while (at < body.size()) {
      size_t end = body.find('\n', at);
      if (end == std::string_view::npos) end = body.size();
      const std::string_view line = body.substr(at, end - at);
      const size_t name_end = line.find_first_of("{ \t");
      if (line.starts_with('#') || line.find_first_not_of(" \t\r") == std::string_view::npos ||
          profile.keeps(line.substr(0, name_end))) {
        out.append(line);
      }
      out.push_back('\n');
      at = end + 1;
    }
    return out;
  }

  // Parses a scrape and appends what the target's profile keeps; the samples kept.
  Result<size_t> write(const ScrapeTarget& t, std::string_view body, int64_t now_ms) {
    const EngineProfile& profile = profileOf(t.engine);
    ParseLimits limits;
    limits.max_bytes = options_.max_body_bytes;
    if (body.size() > limits.max_bytes) {
      return fail(
          invalidArgument(fmt::format("the metrics text is {} bytes, more than the {} allowed",
                                      body.size(), limits.max_bytes)));
    }
    auto parsed = parsePrometheusText(keptLines(body, profile), limits);
    if (!parsed) return fail(parsed.error());
    size_t kept = 0;
    for (Sample& s : parsed->samples) {
      if (!profile.keeps(s.name)) continue;
      Labels labels;
      labels.reserve(s.labels.size() + 1);
      for (auto& [name, value] : s.labels) {
        labels.emplace_back(name == "target" ? "exported_target" : std::move(name),
                            std::move(value));
      }
      labels.emplace_back("target", t.name);
      const AppendStatus appended = store_.append(SeriesKey(std::move(s.name), std::move(labels)),
                                                  s.timestamp_ms.value_or(now_ms), s.value);
      if (appended == AppendStatus::kAppended) ++kept;
    }
    return kept;
  }

  asio::io_context& io_;
  SeriesStore& store_;
  const Clock& clock_;
  // Appended to (add()) only on io_'s thread, where the loops read it; elements never move.
  std::deque<ScrapeTarget> targets_;
  // Per target, touched only on io_'s thread: whether it is still scraped, and whether its loop
  // runs.
  struct Running {
    bool active = true;
    bool looping = false;
  };
  std::deque<Running> running_;
  std::function<void(const std::string&)> on_scrape_;
  const ScraperOptions options_;
  http::HttpClient client_;
  http::Family<http::Gauge>& up_;
  http::Family<http::Gauge>& duration_;
  http::Family<http::Gauge>& samples_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  std::atomic<bool> stopping_{false};
  bool started_ = false;  // on io_'s thread after start()
  mutable std::mutex status_mu_;
  std::vector<ScrapeStatus> statuses_;  // guarded by status_mu_; one per target
  std::mutex timers_mu_;
  std::vector<asio::steady_timer*> timers_;  // guarded by timers_mu_
};

Scraper::Scraper(asio::io_context& io, SeriesStore& store, http::MetricsRegistry& metrics,
                 const Clock& clock, std::vector<ScrapeTarget> targets,
                 std::function<void(const std::string&)> on_scrape, ScraperOptions options)
    : impl_(std::make_shared<Impl>(io, store, metrics, clock, std::move(targets),
                                   std::move(on_scrape), options)) {}

Scraper::~Scraper() { impl_->stop(); }

void Scraper::start() { impl_->start(); }
void Scraper::stop() { impl_->stop(); }

std::vector<ScrapeStatus> Scraper::statuses() const {
  std::lock_guard lock(impl_->status_mu_);
  return impl_->statuses_;
}

std::optional<ScrapeStatus> Scraper::status(const std::string& target) const {
  std::lock_guard lock(impl_->status_mu_);
  for (const auto& s : impl_->statuses_) {
    if (s.target == target) return s;
  }
  return std::nullopt;
}

const std::deque<ScrapeTarget>& Scraper::targets() const { return impl_->targets_; }

void Scraper::add(ScrapeTarget target) {
  asio::post(impl_->io_,
             [impl = impl_, t = std::move(target)]() mutable { impl->add(std::move(t)); });
}

void Scraper::remove(const std::string& name) {
  asio::post(impl_->io_, [impl = impl_, name] { impl->remove(name); });
}

asio::awaitable<void> Scraper::scrapeOnce(size_t index) { return impl_->scrapeOnce(index); }

}  // namespace purser::observe
