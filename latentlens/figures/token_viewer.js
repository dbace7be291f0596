// latentlens's token-level attention viewer: one copy per page, drawn into every
// <div class="llv" data-llv="ID"> whose data lies in <script type="application/json" id="ID">.
// Hover a token: each head's pattern over the keys (the chosen layer). Hover a key in
// that pattern (or click a token to hold the query, then hover another): the pair's latent
// code a(l, h, q, k) over every layer and head.
(function () {
  if (window.latentlensTokenViewer) { window.latentlensTokenViewer.drawAll(); return; }

  function decode(data, field) {  // base64 of little-endian uint16 values * 65535
    var bytes = atob(data[field || "weights"]), view = new DataView(new ArrayBuffer(bytes.length));
    for (var i = 0; i < bytes.length; i++) view.setUint8(i, bytes.charCodeAt(i));
    var values = new Float32Array(bytes.length / 2);
    for (var j = 0; j < values.length; j++) values[j] = view.getUint16(2 * j, true) / 65535;
    return values;
  }

  function element(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function shade(weight) {  // white at 0, dark blue at 1
    var light = Math.round(255 - 200 * weight), green = Math.round(255 - 150 * weight);
    return "rgb(" + light + "," + green + ",255)";
  }

  function shown(token) { return token.replace(/\n/g, "\\n").replace(/ /g, "\u00b7"); }

  function draw(root) {
    if (root.dataset.llvDrawn) return;
    var data = JSON.parse(document.getElementById(root.dataset.llv).textContent);
    var weights = decode(data), n = data.tokens.length, L = data.layers, H = data.heads;
    var features = data.features ? decode(data, "feature_activations") : null;
    var state = { layer: data.layers - 1, query: null, key: null, held: false };
    function a(l, h, q, k) { return weights[((l * H + h) * n + q) * n + k]; }
    function head(h) {
      var groups = data.key_value_groups;
      return groups ? "h" + h + " (kv" + groups[h] + ")" : "h" + h;
    }

    root.dataset.llvDrawn = "1";
    root.appendChild(element("div", "llv-title", data.model));
    var controls = element("div", "llv-controls");
    var select = element("select", "llv-layer");
    for (var l = 0; l < L; l++) {
      var option = element("option", null, "layer " + l);
      option.value = l;
      select.appendChild(option);
    }
    select.value = state.layer;
    controls.appendChild(select);
    var status = element("span", "llv-status");
    controls.appendChild(status);
    root.appendChild(controls);
    var row = element("div", "llv-tokens");
    var tokens = data.tokens.map(function (token, position) {
      var span = element("span", "llv-token", shown(token));
      span.dataset.position = position;
      span.title = "position " + position;
      row.appendChild(span);
      return span;
    });
    root.appendChild(row);
    var pattern = element("div", "llv-pattern llv-scroll");
    var code = element("div", "llv-code llv-scroll");
    root.appendChild(pattern);
    root.appendChild(code);

    function say() {
      if (state.query === null) {
        status.textContent = "hover a token to see where each head's query looks";
      } else {
        status.textContent = "query " + state.query + " '" + shown(data.tokens[state.query]) +
          "'" + (state.held ? " (held: click it again to let go)" : " (click to hold)") +
          (state.key === null ? "" : ", key " + state.key + " '" + shown(data.tokens[state.key]) + "'");
      }
    }

    function drawTokens() {
      tokens.forEach(function (span, k) {
        var mean = 0;
        if (state.query !== null) {
          for (var h = 0; h < H; h++) mean += a(state.layer, h, state.query, k);
          mean /= H;
        }
        span.style.background = state.query === null ? "" : shade(mean);
        span.classList.toggle("llv-query", k === state.query);
        span.classList.toggle("llv-key", k === state.key);
      });
    }

    function drawPattern() {
      pattern.textContent = "";
      if (state.query === null) return;
      var table = element("table", "llv-pattern-table");
      var top = element("tr");
      top.appendChild(element("th", null, "layer " + state.layer));
      for (var k = 0; k < n; k++) top.appendChild(element("th", null, shown(data.tokens[k])));
      table.appendChild(top);
      for (var h = 0; h < H; h++) {
        var tr = element("tr");
        tr.appendChild(element("th", null, head(h)));
        for (var kk = 0; kk < n; kk++) {
          var w = a(state.layer, h, state.query, kk), td = element("td", "llv-cell");
          td.style.background = shade(w);
          td.title = head(h) + ", key " + kk + ": " + w.toFixed(3);
          td.dataset.key = kk;
          tr.appendChild(td);
        }
        table.appendChild(tr);
      }
      table.addEventListener("mouseover", function (event) {
        var key = event.target.dataset ? event.target.dataset.key : undefined;
        if (key !== undefined) setKey(Number(key));
      });
      pattern.appendChild(table);
    }

    function drawCode() {
      code.textContent = "";
      if (state.query === null || state.key === null) return;
      code.appendChild(element("div", "llv-code-title", "latent code a(l, h, q=" + state.query +
        ", k=" + state.key + "): '" + shown(data.tokens[state.query]) + "' on '" +
        shown(data.tokens[state.key]) + "'"));
      var table = element("table", "llv-code-table");
      var top = element("tr");
      top.appendChild(element("th"));
      for (var h = 0; h < H; h++) top.appendChild(element("th", null, head(h)));
      table.appendChild(top);
      for (var l = 0; l < L; l++) {
        var tr = element("tr");
        tr.appendChild(element("th", null, "layer " + l));
        for (var hh = 0; hh < H; hh++) {
          var w = a(l, hh, state.query, state.key), td = element("td", "llv-value", w.toFixed(3));
          td.style.background = shade(w);
          tr.appendChild(td);
        }
        table.appendChild(tr);
      }
      code.appendChild(table);
      if (!data.features) return;
      var F = data.features.length, used = [];
      for (var f = 0; f < F; f++) {
        var value = features[(state.query * n + state.key) * F + f] * data.feature_scale;
        if (value > 0.005 * data.feature_scale) used.push([value, data.features[f]]);
      }
      used.sort(function (x, y) { return y[0] - x[0]; });
      var list = element("div", "llv-features", used.length ? "dictionary features of this code: " +
        used.slice(0, 3).map(function (u) { return u[1] + " " + u[0].toFixed(3); }).join("; ") :
        "dictionary features of this code: none active");
      code.appendChild(list);
    }

    function redraw() { say(); drawTokens(); drawPattern(); drawCode(); }
    function setKey(key) {
      if (state.key === key) return;
      state.key = key;
      say(); drawTokens(); drawCode();
    }

    row.addEventListener("mouseover", function (event) {
      var position = event.target.dataset ? event.target.dataset.position : undefined;
      if (position === undefined) return;
      if (state.held) { setKey(Number(position)); return; }
      state.query = Number(position);
      state.key = null;
      redraw();
    });
    row.addEventListener("click", function (event) {
      var position = event.target.dataset ? event.target.dataset.position : undefined;
      if (position === undefined) return;
      position = Number(position);
      state.held = !(state.held && state.query === position);
      if (state.held) { state.query = position; state.key = null; }
      redraw();
    });
    select.addEventListener("change", function () { state.layer = Number(select.value); redraw(); });
    redraw();
  }

  window.latentlensTokenViewer = {
    drawAll: function () { document.querySelectorAll("div.llv[data-llv]").forEach(draw); }
  };
  window.latentlensTokenViewer.drawAll();
})();
