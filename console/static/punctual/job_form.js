/*
 * The admin's job form (add and change pages), two small behaviours:
 *
 * 1. A live schedule preview. While the owner types a cron, an interval, a
 *    one-off time, a time zone, a start or an end, the form asks the API's schedule preview
 *    (POST /api/v1/schedules/preview/, authenticated by the admin session and
 *    its CSRF token) for the schedule in words, its next fires in the job's
 *    zone and in UTC, and its warnings (daylight-saving changes, day fields).
 *    Requests wait until typing pauses (DEBOUNCE_MS), one at a time, so normal
 *    typing stays far below the API's per-owner rate limit. A refused schedule
 *    shows the API's message next to the field it names, before saving.
 *    The server still judges everything again when the form is saved.
 *
 * 2. "Max catch-up" shows only under the "Catch up" misfire policy, the only
 *    one that reads it. Hidden, it is still posted and validated.
 *
 * Plain DOM, no framework: the admin serves this file itself.
 */
(function () {
  "use strict";

  var DEBOUNCE_MS = 400; // at least 300 ms between two previews of one owner
  var TIMES = ["run_at", "start_at", "end_at"]; // date and time inputs: NAME_0, NAME_1
  var SCHEDULE_INPUTS = ["cron", "interval_seconds", "timezone"].concat(
    TIMES.reduce(function (inputs, name) {
      return inputs.concat([name + "_0", name + "_1"]);
    }, [])
  );
  var ERROR_FIELDS = ["cron", "interval_seconds", "timezone"].concat(TIMES);

  function ready(fn) {
    if (document.readyState === "loading") {
      document.addEventListener("DOMContentLoaded", fn);
    } else {
      fn();
    }
  }

  function byId(id) {
    return document.getElementById(id);
  }

  function element(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // -- max catch-up ------------------------------------------------------------

  function setUpCatchupRow() {
    var policy = byId("id_misfire_policy");
    var row = document.querySelector(".form-row.field-max_catchup");
    if (!policy || !row) return;
    function toggle() {
      row.hidden = policy.value !== "catch_up";
    }
    policy.addEventListener("change", toggle);
    toggle();
  }

  // -- the credential rows: each under its authentication kind ------------------

  function setUpAuthRows() {
    var kind = byId("id_auth_kind");
    if (!kind) return;
    var rows = {
      auth_token: "bearer",
      auth_username: "basic",
      auth_password: "basic",
    };
    function toggle() {
      Object.keys(rows).forEach(function (name) {
        var row = document.querySelector(".form-row.field-" + name);
        // A row with an error stays shown, whatever the kind.
        if (row && !row.classList.contains("errors")) row.hidden = kind.value !== rows[name];
      });
    }
    kind.addEventListener("change", toggle);
    toggle();
  }

  // -- the schedule preview ----------------------------------------------------

  function SchedulePreview(box) {
    this.box = box;
    this.url = box.dataset.url;
    this.count = Number(box.dataset.count || 5);
    this.timer = null;
    this.sequence = 0;
    this.controller = null;
    this.pausedUntil = 0;
  }

  SchedulePreview.prototype.value = function (name) {
    var input = byId("id_" + name);
    return input ? input.value.trim() : "";
  };

  // A time (start_at, run_at, end_at) as the API takes it: ISO 8601 with an
  // offset. The admin reads dates in its own zone, UTC (settings.TIME_ZONE),
  // hence the "Z".
  SchedulePreview.prototype.time = function (name) {
    var date = this.value(name + "_0");
    var time = this.value(name + "_1");
    if (!date && !time) return null;
    if (time && time.length === 5) time += ":00";
    return date + "T" + (time || "00:00:00") + "Z";
  };

  SchedulePreview.prototype.body = function () {
    var interval = this.value("interval_seconds");
    return {
      cron: this.value("cron") || null,
      // A whole number goes as one; anything else as typed, for the API to name.
      interval_seconds: interval === "" ? null : /^\d+$/.test(interval) ? Number(interval) : interval,
      timezone: this.value("timezone") || "UTC",
      run_at: this.time("run_at"),
      start_at: this.time("start_at"),
      end_at: this.time("end_at"),
      count: this.count,
    };
  };

  SchedulePreview.prototype.schedule = function () {
    var self = this;
    clearTimeout(this.timer);
    this.timer = setTimeout(function () {
      self.send();
    }, DEBOUNCE_MS);
  };

  SchedulePreview.prototype.send = function () {
    var self = this;
    var body = this.body();
    if (!body.cron && body.interval_seconds === null && body.run_at === null) {
      this.clearFieldErrors();
      this.show([element("p", "punctual-quiet", "Enter a cron, an interval or a run at time to preview the schedule.")]);
      return;
    }
    var wait = this.pausedUntil - Date.now();
    if (wait > 0) {
      this.timer = setTimeout(function () {
        self.send();
      }, wait);
      return;
    }
    if (this.controller) this.controller.abort(); // only the newest answer matters
    this.controller = new AbortController();
    var sequence = ++this.sequence;
    this.box.setAttribute("aria-busy", "true");
    fetch(this.url, {
      method: "POST",
      credentials: "same-origin",
      signal: this.controller.signal,
      headers: {
        "Content-Type": "application/json",
        Accept: "application/json",
        "X-CSRFToken": csrfToken(),
      },
      body: JSON.stringify(body),
    })
      .then(function (response) {
        return response
          .json()
          .catch(function () {
            return {};
          })
          .then(function (data) {
            if (sequence === self.sequence) self.answer(response, data);
          });
      })
      .catch(function (error) {
        if (error.name !== "AbortError" && sequence === self.sequence) {
          self.show([element("p", "punctual-preview-problem", "The preview is unavailable: " + error.message)]);
        }
      });
  };

  SchedulePreview.prototype.answer = function (response, data) {
    this.box.removeAttribute("aria-busy");
    this.box.dataset.state = String(response.status);
    this.clearFieldErrors();
    if (response.ok) {
      this.showFires(data);
      return;
    }
    if (response.status === 400) {
      this.showInvalid(data);
      return;
    }
    if (response.status === 429) {
      var seconds = Number(response.headers.get("Retry-After") || 10);
      this.pausedUntil = Date.now() + seconds * 1000;
      this.show([element("p", "punctual-preview-problem", "Too many previews for now: the next one in " + seconds + " s.")]);
      this.schedule();
      return;
    }
    if (response.status === 401 || response.status === 403) {
      this.show([element("p", "punctual-preview-problem", "Sign in again to preview the schedule.")]);
      return;
    }
    this.show([element("p", "punctual-preview-problem", data.detail || "The preview failed (HTTP " + response.status + ").")]);
  };

  SchedulePreview.prototype.showFires = function (data) {
    var parts = [element("p", "punctual-preview-text", data.description)];
    if (!data.fires.length) {
      parts.push(element("p", "punctual-quiet", "This schedule has no further fires."));
    } else {
      var zone = this.body().timezone;
      var table = element("table", "punctual-fires punctual-preview-fires");
      var head = table.createTHead().insertRow();
      ["in " + zone, "UTC"].forEach(function (title) {
        head.appendChild(element("th", "", title));
      });
      var rows = table.createTBody();
      data.fires.forEach(function (fire, index) {
        var row = rows.insertRow();
        row.insertCell().textContent = localText(data.local_fires[index]);
        row.insertCell().textContent = fire.replace("T", " ").replace("Z", " UTC");
      });
      parts.push(table);
    }
    if (data.warnings && data.warnings.length) {
      var list = element("ul", "punctual-warnings punctual-preview-warnings");
      data.warnings.forEach(function (warning) {
        list.appendChild(element("li", "", warning));
      });
      parts.push(list);
    }
    this.show(parts);
  };

  SchedulePreview.prototype.showInvalid = function (data) {
    var self = this;
    var elsewhere = [];
    Object.keys(data).forEach(function (key) {
      var messages = [].concat(data[key]);
      if (ERROR_FIELDS.indexOf(key) === -1 || !self.showFieldError(key, messages)) {
        elsewhere = elsewhere.concat(messages);
      }
    });
    var parts = [element("p", "punctual-preview-problem", "Not a valid schedule yet: see the messages above.")];
    elsewhere.forEach(function (message) {
      parts.push(element("p", "punctual-preview-problem", message));
    });
    this.show(parts);
  };

  // Next to the field, as the server's own errors are shown.
  SchedulePreview.prototype.showFieldError = function (field, messages) {
    var input = byId("id_" + field) || byId("id_" + field + "_0");
    if (!input) return false;
    var list = element("ul", "errorlist punctual-live-error");
    list.id = "live-error-" + field;
    messages.forEach(function (message) {
      list.appendChild(element("li", "", message));
    });
    var anchor = input.closest(".flex-container") || input.parentNode;
    anchor.parentNode.insertBefore(list, anchor.nextSibling);
    return true;
  };

  SchedulePreview.prototype.clearFieldErrors = function () {
    document.querySelectorAll(".punctual-live-error").forEach(function (node) {
      node.remove();
    });
  };

  SchedulePreview.prototype.show = function (parts) {
    this.box.removeAttribute("aria-busy");
    this.box.replaceChildren.apply(this.box, parts);
  };

  SchedulePreview.prototype.start = function () {
    var self = this;
    SCHEDULE_INPUTS.forEach(function (name) {
      var input = byId("id_" + name);
      if (!input) return;
      input.addEventListener("input", function () {
        self.schedule();
      });
      input.addEventListener("change", function () {
        self.schedule();
      });
    });
    if (this.box.dataset.onLoad === "true") this.send();
  };

  // "2026-03-29T09:00:00+02:00" as "Sun 2026-03-29 09:00:00 UTC+02:00".
  function localText(iso) {
    var match = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}:\d{2}:\d{2})(?:\.\d+)?([+-]\d{2}:\d{2}|Z)$/.exec(iso);
    if (!match) return iso;
    var day = new Date(Date.UTC(Number(match[1]), Number(match[2]) - 1, Number(match[3])));
    var weekday = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"][day.getUTCDay()];
    var offset = match[5] === "Z" ? "+00:00" : match[5];
    return weekday + " " + match[1] + "-" + match[2] + "-" + match[3] + " " + match[4] + " UTC" + offset;
  }

  function csrfToken() {
    var input = document.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  ready(function () {
    setUpCatchupRow();
    setUpAuthRows();
    var box = byId("schedule-preview");
    if (box) new SchedulePreview(box).start();
  });
})();
