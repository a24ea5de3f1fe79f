// The approval page works without this script. It only keeps "waiting for" times ticking, and,
// on a repair's page, says when the repair changed (another person decided, the process gave up)
// without reloading: a half-written edit is never thrown away.
"use strict";
(function () {
  function ago(seconds) {
    seconds = Math.max(0, Math.floor(seconds));
    if (seconds < 60) return seconds + " s";
    if (seconds < 3600) return Math.floor(seconds / 60) + " min " + String(seconds % 60).padStart(2, "0") + " s";
    return Math.floor(seconds / 3600) + " h " + String(Math.floor(seconds % 3600 / 60)).padStart(2, "0") + " min";
  }
  function tick() {
    document.querySelectorAll(".since[data-since]").forEach(function (el) {
      el.textContent = ago(Date.now() / 1000 - parseFloat(el.dataset.since));
    });
  }
  function watch(repair) {
    var url = "/ui/repairs/" + encodeURIComponent(repair.dataset.id) + "/state";
    setInterval(function () {
      fetch(url, { credentials: "same-origin", cache: "no-store" }).then(function (reply) {
        return reply.ok ? reply.json() : null;
      }).then(function (state) {
        if (state && (state.status !== repair.dataset.status || String(state.events) !== repair.dataset.events)) {
          document.getElementById("changed").hidden = false;
        }
      }).catch(function () {});
    }, 5000);
  }
  document.addEventListener("DOMContentLoaded", function () {
    setInterval(tick, 1000);
    var repair = document.getElementById("repair");
    if (repair && (repair.dataset.status === "waiting" || repair.dataset.status === "proposed")) watch(repair);
  });
})();
