// hightide console: lag-history charts (uPlot), refreshed in place from the page's
// history API (data-api: /api/groups/<group>/history, /api/share-groups/<group>/history;
// a share group has the offset-lag chart only). The tables refresh themselves through htmx.
// The groups list's name filter applies after a pause in typing.
(function () {
  "use strict";
  const name = document.getElementById("filter-name");
  if (name) {
    if (name.value) {  // the page reloaded with the filter: keep typing where it was
      name.focus();
      name.setSelectionRange(name.value.length, name.value.length);
    }
    let timer = null;
    name.addEventListener("input", () => {
      clearTimeout(timer);
      timer = setTimeout(() => name.form.submit(), 600);
    });
  }
})();

(function () {
  "use strict";
  const box = document.getElementById("charts");
  if (!box || typeof uPlot === "undefined") return;
  const group = box.dataset.group;
  const refreshMs = Math.max(500, parseFloat(box.dataset.refresh || "2") * 1000);
  const url = box.dataset.api || ("/api/groups/" + encodeURIComponent(group) + "/history");
  const timeBox = document.getElementById("chart-time");
  const width = () => Math.max(320, Math.min(box.clientWidth || 900, 1100));
  const axes = (label) => [{}, {label: label, size: 70}];
  const lagChart = new uPlot({
    title: "Offset lag (records, sum over partitions)", width: width(), height: 220,
    scales: {x: {time: true}},
    series: [{}, {label: "lag", stroke: "#1f6feb", width: 2, points: {show: true, size: 4}}],
    axes: axes("records"),
  }, [[], []], document.getElementById("chart-lag"));
  const timeChart = timeBox && new uPlot({
    title: "Time lag (seconds, largest partition)", width: width(), height: 220,
    scales: {x: {time: true}},
    series: [{}, {label: "time lag", stroke: "#b35900", width: 2, points: {show: true, size: 4}},
             {label: "time lag (lower bound)", stroke: "#b35900", width: 2, dash: [6, 4],
              points: {show: true, size: 4, fill: "#fff"}}],
    axes: axes("seconds"),
  }, [[], [], []], timeBox);

  async function refresh() {
    try {
      const r = await fetch(url, {headers: {"Accept": "application/json"}});
      if (!r.ok) return;
      const d = await r.json();
      lagChart.setData([d.t, d.lag]);
      if (timeChart) timeChart.setData([d.t, d.time_lag_s, d.time_lag_bound_s]);
      box.dataset.points = String(d.t.length);
      box.dataset.lastLag = d.lag.length ? String(d.lag[d.lag.length - 1]) : "";
      box.dataset.updated = String(Date.now());
    } catch (e) {
      box.dataset.error = String(e);
    } finally {
      setTimeout(refresh, refreshMs);
    }
  }
  window.addEventListener("resize", () => {
    lagChart.setSize({width: width(), height: 220});
    if (timeChart) timeChart.setSize({width: width(), height: 220});
  });
  refresh();
})();
