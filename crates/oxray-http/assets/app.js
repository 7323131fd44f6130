// The dashboard's own script: logging in with the token and out, tailing a job's log
// over the Jobs API's WebSocket, and showing times in the browser's zone.
// Everything else is server-rendered HTML that htmx refreshes.
"use strict";

function localTimes(root) {
  for (const el of root.querySelectorAll("time[data-ms]")) {
    const ms = Number(el.dataset.ms);
    if (ms > 0) el.textContent = new Date(ms).toLocaleString();
  }
}

function login(form) {
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const token = form.querySelector("input[name=token]").value.trim();
    const said = form.querySelector(".error");
    const reply = await fetch("/api/authenticate", {
      method: "POST",
      headers: { Authorization: `Bearer ${token}`, "X-Oxray-Csrf": "1" },
      credentials: "same-origin",
    });
    if (reply.ok) {
      window.location.assign("/overview");
    } else {
      said.textContent = reply.status === 403 ? "That is not this cluster's token." : `Refused (${reply.status}).`;
    }
  });
}

// Ends this browser's session on the head (its cookie is removed too), then shows the login form.
function logout(button) {
  button.addEventListener("click", async () => {
    await fetch("/api/logout", { method: "POST", headers: { "X-Oxray-Csrf": "1" }, credentials: "same-origin" });
    window.location.assign("/");
  });
}

function tail(pre) {
  const scheme = window.location.protocol === "https:" ? "wss" : "ws";
  const socket = new WebSocket(`${scheme}://${window.location.host}${pre.dataset.tail}`);
  socket.addEventListener("message", (event) => {
    const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    pre.textContent += event.data;
    if (atBottom) pre.scrollTop = pre.scrollHeight;
  });
  socket.addEventListener("close", () => {
    pre.dataset.ended = "true";
  });
}

document.addEventListener("DOMContentLoaded", () => {
  localTimes(document);
  const form = document.querySelector("form.login");
  if (form) login(form);
  const pre = document.querySelector("pre[data-tail]");
  if (pre) tail(pre);
  const out = document.getElementById("logout");
  if (out) logout(out);
});

document.addEventListener("htmx:afterSwap", (event) => localTimes(event.target));

// A deleted job has no page left: go back to the list.
document.addEventListener("htmx:afterRequest", (event) => {
  if (event.detail.elt.id === "delete-job" && event.detail.successful) window.location.assign("/jobs");
});
