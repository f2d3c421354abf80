// flashgate's sale page: a client of the public API (API.md, "Buyers in a
// browser"). It names the buyer from the URL's fragment (#token=JWT or
// #user=ID), keeps the buyer, the ticket, the Idempotency-Key and the
// order in the browser so that a reload keeps them, joins and polls the
// waiting room at poll_after_ms, buys once admitted, and follows the order
// until it is created. A 429 or 503 is retried after Retry-After.
(function () {
  "use strict";
  var doc = document.documentElement;
  var api = (doc.getAttribute("data-fg-api") || "").replace(/\/+$/, "");
  var fg = function (name) { return document.querySelector('[data-fg="' + name + '"]'); };
  var ui = {
    title: fg("title"), state: fg("state"), remaining: fg("remaining"), queue: fg("queue"),
    position: fg("position"), ahead: fg("ahead"), eta: fg("eta"), join: fg("join"),
    buy: fg("buy"), order: fg("order"), message: fg("message")
  };
  var saleId = doc.getAttribute("data-fg-sale") || decodeURIComponent((location.pathname.match(/\/s\/([^/]+)$/) || [])[1] || "");
  var stateWords = { upcoming: "not started yet", active: "on sale", locked: "paused", sold_out: "sold out", ended: "ended" };
  var refusals = {
    sold_out: "Sold out: no unit is left.",
    insufficient_stock: "Fewer units are left than you asked for.",
    limit_reached: "You already hold as many units as one buyer may buy.",
    not_started: "The sale has not started yet.",
    ended: "The sale has ended.",
    locked: "The sale is paused for a moment; try again shortly.",
    not_admitted: "It is not your turn yet, or your pass has ended.",
    unauthorized: "Your sign-in link is not valid any more; open the link from the shop again.",
    forbidden: "This link names another buyer.",
    not_found: "This sale does not exist.",
    conflict: "This sale has no waiting room.",
    bad_request: "The request was refused as malformed.",
    too_large: "The request was refused as too large.",
    idempotency_conflict: "This purchase was already made with other details."
  };

  function say(text, kind) {
    ui.message.textContent = text || "";
    if (kind) { ui.message.setAttribute("data-kind", kind); } else { ui.message.removeAttribute("data-kind"); }
  }

  // The buyer: the fragment's, kept for this tab (a reload has no fragment:
  // it is taken off the address bar so that the token is not left there).
  function readBuyer() {
    var key = "fg:buyer:" + saleId;
    var params = new URLSearchParams(location.hash.replace(/^#/, ""));
    var b = null;
    if (params.get("token")) { b = { token: params.get("token"), user: subOf(params.get("token")) }; }
    else if (params.get("user")) { b = { token: "", user: params.get("user") }; }
    if (b) {
      try { sessionStorage.setItem(key, JSON.stringify(b)); } catch (e) { /* private mode: this load only */ }
      history.replaceState(null, "", location.pathname + location.search);
      return b;
    }
    try { return JSON.parse(sessionStorage.getItem(key) || "null"); } catch (e) { return null; }
  }

  function subOf(token) {
    try {
      var p = token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
      return JSON.parse(atob(p + "===".slice((p.length + 3) % 4))).sub || "";
    } catch (e) { return ""; }
  }

  var buyer = readBuyer();
  var storeKey = buyer ? "fg:" + saleId + ":" + buyer.user : "";
  var saved = {};
  try { saved = JSON.parse(localStorage.getItem(storeKey) || "{}") || {}; } catch (e) { saved = {}; }
  function keep() { try { localStorage.setItem(storeKey, JSON.stringify(saved)); } catch (e) { /* kept in memory */ } }

  function newKey() {
    var a = new Uint8Array(16);
    crypto.getRandomValues(a);
    return Array.prototype.map.call(a, function (x) { return (x + 256).toString(16).slice(1); }).join("");
  }

  // call sends one request of the public API and returns {code, body,
  // retry}; a network failure is {code: 0}.
  async function call(method, path, body, ticket) {
    var headers = {};
    if (body) { headers["Content-Type"] = "application/json"; }
    if (buyer && buyer.token) { headers.Authorization = "Bearer " + buyer.token; }
    if (ticket) { headers["Flashgate-Ticket"] = ticket; }
    if (body && body.key) { headers["Idempotency-Key"] = body.key; }
    var payload;
    if (body) {
      payload = { quantity: 1 };
      if (buyer && !buyer.token) { payload.user_id = buyer.user; }
    }
    try {
      var res = await fetch(api + path, { method: method, headers: headers, body: payload ? JSON.stringify(payload) : undefined, cache: "no-store" });
      var data = {};
      try { data = await res.json(); } catch (e) { data = {}; }
      var retry = parseInt(res.headers.get("Retry-After") || "", 10);
      return { code: res.status, body: data, retry: isFinite(retry) && retry > 0 ? retry : 1 };
    } catch (e) {
      return { code: 0, body: {}, retry: 2 };
    }
  }

  var salePath = "/v1/sales/" + encodeURIComponent(saleId);
  var view = null;
  var timers = {};
  function later(name, ms, fn) { clearTimeout(timers[name]); timers[name] = setTimeout(fn, ms); }
  function busy(r) { return r.code === 0 || r.code === 429 || r.code === 503; }
  function waitWords(r) { return r.code === 0 ? "The shop cannot be reached" : "The sale is busy"; }

  function showState(state, remaining) {
    ui.state.textContent = stateWords[state] || state;
    ui.state.setAttribute("data-state", state);
    if (remaining !== undefined && remaining !== null) { ui.remaining.textContent = String(remaining); }
    if (state === "sold_out" || state === "ended") {
      ui.buy.disabled = true;
      ui.join.disabled = true;
    }
  }

  async function loadSale() {
    var r = await call("GET", salePath);
    if (busy(r)) { say(waitWords(r) + "; trying again in " + r.retry + " s.", "wait"); later("sale", r.retry * 1000, loadSale); return; }
    if (r.code === 404) { showState("not_found"); ui.state.textContent = "no such sale"; say(refusals.not_found, "refused"); return; }
    if (r.code !== 200) { say(refusals[r.body.status] || "Unexpected answer " + r.code + ".", "refused"); return; }
    view = r.body;
    ui.title.textContent = "Sale " + view.sale_id;
    document.title = "Sale " + view.sale_id;
    showState(view.state, view.remaining);
    if (view.state === "upcoming") { later("sale", 5000, loadSale); }
    if (!buyer) { say("This link names no buyer: open the sale from the shop's link.", "refused"); return; }
    if (saved.order) { followOrder(); }
    if (view.waiting_room && view.waiting_room !== "off") {
      ui.queue.hidden = false;
      if (saved.ticket) { poll(); } else { ui.join.hidden = false; ui.join.disabled = view.state === "sold_out" || view.state === "ended"; }
    } else {
      ui.buy.disabled = view.state !== "active";
      if (view.state === "upcoming") { say("The sale has not started yet; this page opens it by itself."); }
    }
  }

  function showPlace(q) {
    ui.position.textContent = q.position === null || q.position === undefined ? "drawn when the sale starts" : String(q.position);
    ui.ahead.textContent = q.ahead === null || q.ahead === undefined ? "–" : String(q.ahead);
    ui.eta.textContent = q.status === "admitted" ? "none: it is your turn" : duration(q.eta_seconds);
    if (q.remaining !== undefined) { ui.remaining.textContent = String(q.remaining); }
  }

  function duration(s) {
    if (s === null || s === undefined) { return "–"; }
    if (s < 60) { return "under a minute"; }
    var m = Math.round(s / 60);
    return m < 60 ? "about " + m + " min" : "about " + Math.round(m / 6) / 10 + " h";
  }

  // queueAnswer handles a join's or a poll's answer.
  function queueAnswer(r, again) {
    if (busy(r)) { say(waitWords(r) + "; trying again in " + r.retry + " s.", "wait"); later("queue", r.retry * 1000, again); return; }
    if (r.code === 200) {
      saved.ticket = r.body.ticket; keep();
      ui.join.hidden = true;
      showPlace(r.body);
      if (r.body.status === "admitted") {
        ui.buy.disabled = !!saved.pending;
        var until = r.body.pass_until ? new Date(r.body.pass_until) : null;
        if (!saved.order) { say(until ? "It is your turn: buy before " + until.toLocaleTimeString() + "." : "It is your turn: buy now."); }
      } else {
        ui.buy.disabled = true;
        if (!saved.order) { say("You are in the queue; this page follows your place by itself."); }
      }
      later("queue", Math.max(r.body.poll_after_ms || 1000, 500), poll);
      return;
    }
    var status = r.body.status || "";
    if (status === "not_admitted") { delete saved.ticket; keep(); ui.join.hidden = false; ui.join.disabled = false; }
    if (status === "sold_out") { showState("sold_out", 0); }
    if (status === "ended") { showState("ended"); }
    ui.buy.disabled = true;
    say(refusals[status] || "Unexpected answer " + r.code + ".", "refused");
  }

  async function join() {
    ui.join.disabled = true;
    queueAnswer(await call("POST", salePath + "/queue", { key: "" }), join);
  }

  async function poll() {
    queueAnswer(await call("GET", salePath + "/queue", null, saved.ticket), poll);
  }

  // buy sends the buy, with the same Idempotency-Key until it is answered
  // for good: a double click, a reload or a retry after a 429 or 503 makes
  // one order at the most.
  async function buy() {
    if (saved.pending) { return; }
    if (!saved.key) { saved.key = newKey(); }
    saved.pending = true; keep();
    ui.buy.disabled = true;
    say("Buying…");
    var r = await call("POST", salePath + "/orders", { key: saved.key }, saved.ticket);
    if (busy(r)) {
      say(waitWords(r) + "; your purchase is tried again in " + r.retry + " s.", "wait");
      later("buy", r.retry * 1000, function () { saved.pending = false; buy(); });
      return;
    }
    saved.pending = false;
    if (r.code === 202) {
      saved.order = r.body.order_id; delete saved.key; keep();
      showOrder(r.body);
      say("Your order is taken.");
      followOrder();
      // Not at once: the second click of a double click must not buy again.
      ui.buy.textContent = "Buy another";
      later("again", 2000, function () { ui.buy.disabled = false; });
      return;
    }
    keep();
    var status = r.body.status || "";
    if (status === "sold_out") { showState("sold_out", 0); }
    if (status === "ended") { showState("ended"); }
    say(refusals[status] || "Unexpected answer " + r.code + ".", "refused");
    ui.buy.disabled = status === "sold_out" || status === "ended" || status === "limit_reached";
    if (status === "not_admitted" && saved.ticket) { poll(); }
  }

  function showOrder(o) {
    ui.order.hidden = false;
    var rows = [["Order", o.order_id], ["Status", o.status === "created" ? "created" : "being recorded"], ["State", o.state]];
    if (o.pay_by) { rows.push(["Pay by", new Date(o.pay_by).toLocaleString()]); }
    var dl = document.createElement("dl");
    rows.forEach(function (row) {
      if (row[1] === undefined) { return; }
      var dt = document.createElement("dt"); dt.textContent = row[0];
      var dd = document.createElement("dd"); dd.textContent = row[1];
      dd.setAttribute("data-fg-field", row[0].toLowerCase().replace(/ /g, "_"));
      dl.appendChild(dt); dl.appendChild(dd);
    });
    ui.order.replaceChildren(dl);
    ui.order.setAttribute("data-status", o.status || "");
    ui.order.setAttribute("data-state", o.state || "");
  }

  var orderWait = 500;
  async function followOrder() {
    var r = await call("GET", salePath + "/orders/" + encodeURIComponent(saved.order));
    if (busy(r)) { later("order", r.retry * 1000, followOrder); return; }
    if (r.code !== 200) { say(refusals[r.body.status] || "Unexpected answer " + r.code + ".", "refused"); return; }
    showOrder(r.body);
    if (r.body.status === "created" && r.body.state !== "pending_payment") { return; }
    orderWait = r.body.status === "created" ? 10000 : Math.min(orderWait * 2, 5000);
    later("order", orderWait, followOrder);
  }

  ui.join.addEventListener("click", join);
  ui.buy.addEventListener("click", buy);
  if (!saleId) { say(refusals.not_found, "refused"); return; }
  saved.pending = false;
  loadSale();
})();
