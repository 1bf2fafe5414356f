// Two tenants on one saturated route, both always with requests waiting: "big" sends from 4
// teams, 4 clients each; "small" from 1 team, 4 clients; each client sends one request after
// another. Counts who was served among the first N answers (all while both still send); prints
// JSON.   node load.mjs URL ADMIN_KEY N
const [url, admin, nText] = process.argv.slice(2);
const n = Number(nText);

async function call(path, body) {
  const res = await fetch(url + path, {
    method: "POST",
    headers: { Authorization: `Bearer ${admin}`, "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  const data = await res.json();
  return { ok: res.ok, status: res.status, data };
}
async function must(path, body) {
  const r = await call(path, body);
  if (!r.ok) throw new Error(`${path}: ${r.status} ${JSON.stringify(r.data)}`);
  return r.data;
}

// A tenant granted critical keys (a build without grants takes the plain tenant), and a key of
// `priority` for a user of each of its `teams` teams.
async function tenantKeys(name, teams, priority) {
  let t = await call("/api/v1/tenants", { name, priority: { max_key_priority: "critical" } });
  if (!t.ok) t = { data: await must("/api/v1/tenants", { name }) };
  const keys = [];
  for (let i = 0; i < teams; ++i) {
    const team = await must("/api/v1/teams", { tenant: t.data.id, name: `t${i}` });
    const user = await must("/api/v1/users", { tenant: t.data.id, team: team.id, name: `u${i}` });
    const key = await must("/api/v1/keys", {
      owner: { kind: "user", id: user.id }, name: `k${i}`, priority,
    });
    keys.push(key.key);
  }
  return keys;
}

// How many requests of the route waited in Purser's queue so far (its histogram's count).
async function waited() {
  const text = await (await fetch(url + "/metrics")).text();
  let count = 0;
  for (const line of text.split("\n")) {
    if (line.startsWith("purser_gateway_queue_wait_seconds_count")) {
      count += Number(line.split(" ").pop());
    }
  }
  return count;
}

async function round(priority) {
  const before = await waited();
  const big = await tenantKeys(`big-${priority}`, 4, priority);
  const small = await tenantKeys(`small-${priority}`, 1, priority);
  const served = { big: 0, small: 0 };
  const refused = { big: 0, small: 0 };
  let done = 0;
  const client = async (who, key) => {
    while (done < n) {
      const res = await fetch(url + "/v1/chat/completions", {
        method: "POST",
        headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" },
        body: JSON.stringify({ model: "chat", max_tokens: 8,
          messages: [{ role: "user", content: "hello" }] }),
      });
      await res.arrayBuffer();
      if (done >= n) break;
      if (res.status === 200) {
        served[who] += 1;
        done += 1;
      } else {
        refused[who] += 1;
        await new Promise((r) => setTimeout(r, 20));
      }
    }
  };
  const clients = [];
  for (const key of big) for (let i = 0; i < 4; ++i) clients.push(client("big", key));
  for (let i = 0; i < 4; ++i) clients.push(client("small", small[0]));
  await Promise.all(clients);
  const total = served.big + served.small;
  return {
    served, refused, waited_in_purser: (await waited()) - before,
    small_share_pct: Math.round((1000 * served.small) / total) / 10,
    big_share_pct: Math.round((1000 * served.big) / total) / 10,
  };
}

const critical = await round("critical");
const standard = await round("standard");
console.log(JSON.stringify({
  requests: n,
  clients: { big: "4 teams x 4", small: "1 team x 4" },
  critical, standard,
  goal: "each tenant's share of the critical traffic within 10 points of 50 %",
  met: Math.abs(critical.small_share_pct - 50) <= 10,
}, null, 2));
