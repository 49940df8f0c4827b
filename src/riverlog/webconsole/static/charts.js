// Draws every <div class="chart" data-series='{"x":[...],"series":{name:[...]},"unit":".."}'>
// with uPlot. The page's tables hold the same facts; the charts only add the time dimension.
"use strict";
(function () {
  const colours = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"];
  function draw(el) {
    const data = JSON.parse(el.dataset.series);
    if (!data.x.length) return;
    const names = Object.keys(data.series);
    const opts = {
      width: Math.min(900, window.innerWidth - 80), height: 260,
      scales: { x: { time: true } },
      axes: [{}, { label: data.unit, size: 70 }],
      series: [{}].concat(names.map((n, i) => ({
        label: n, stroke: colours[i % colours.length], width: 2,
      }))),
    };
    el.textContent = "";
    new uPlot(opts, [data.x].concat(names.map((n) => data.series[n])), el);
    el.dataset.drawn = "true";
  }
  document.querySelectorAll("div.chart").forEach(draw);
})();
