//! The bar charts of a report: a few rectangles and labels per panel
//! (latency percentiles, throughput, server CPU per op), the servers side
//! by side, written as SVG text.

use std::fmt::Write as _;

pub(super) struct Panel {
    pub(super) title: &'static str,
    /// (group label, one value per server)
    pub(super) groups: Vec<(String, Vec<f64>)>,
}

const COLOURS: &[&str] = &["#1b9e77", "#d95f02", "#7570b3", "#e7298a"];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

pub(super) fn svg(title: &str, servers: &[String], panels: &[Panel]) -> String {
    let (pw, ph, top) = (320.0, 240.0, 60.0);
    let width = pw * panels.len() as f64 + 20.0;
    let height = ph + top + 50.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(s, r#"<text x="10" y="18" font-size="13" font-weight="bold">{}</text>"#, esc(title));
    for (i, name) in servers.iter().enumerate() {
        let x = 10.0 + i as f64 * 110.0;
        let _ = writeln!(
            s,
            r#"<rect x="{x}" y="28" width="12" height="12" fill="{}"/><text x="{}" y="38">{}</text>"#,
            COLOURS[i % COLOURS.len()],
            x + 16.0,
            esc(name)
        );
    }
    for (p, panel) in panels.iter().enumerate() {
        let x0 = 10.0 + p as f64 * pw + 40.0;
        let (w, h, y0) = (pw - 60.0, ph - 40.0, top + 20.0);
        let max = panel.groups.iter().flat_map(|(_, v)| v.iter().copied()).fold(0.0f64, f64::max);
        let max = if max > 0.0 { max * 1.1 } else { 1.0 };
        let _ = writeln!(s, r#"<text x="{x0}" y="{}" font-weight="bold">{}</text>"#, y0 - 6.0, panel.title);
        let _ = writeln!(s, r#"<line x1="{x0}" y1="{}" x2="{}" y2="{}" stroke="black"/>"#, y0 + h, x0 + w, y0 + h);
        let _ = writeln!(s, r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#, x0 - 4.0, y0 + 4.0, fmt_num(max));
        let _ = writeln!(s, r#"<text x="{}" y="{}" text-anchor="end">0</text>"#, x0 - 4.0, y0 + h);
        let gw = w / panel.groups.len() as f64;
        for (g, (label, values)) in panel.groups.iter().enumerate() {
            let bw = gw * 0.8 / values.len().max(1) as f64;
            for (i, v) in values.iter().enumerate() {
                let bh = v / max * h;
                let bx = x0 + g as f64 * gw + gw * 0.1 + i as f64 * bw;
                let _ = writeln!(
                    s,
                    r#"<rect x="{bx:.1}" y="{:.1}" width="{:.1}" height="{bh:.1}" fill="{}"><title>{}: {}</title></rect>"#,
                    y0 + h - bh,
                    bw * 0.9,
                    COLOURS[i % COLOURS.len()],
                    esc(&servers[i]),
                    fmt_num(*v)
                );
                let _ = writeln!(
                    s,
                    r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="9">{}</text>"#,
                    bx + bw * 0.45,
                    y0 + h - bh - 3.0,
                    fmt_num(*v)
                );
            }
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
                x0 + g as f64 * gw + gw / 2.0,
                y0 + h + 14.0,
                esc(label)
            );
        }
    }
    s.push_str("</svg>\n");
    s
}

pub(super) fn fmt_num(v: f64) -> String {
    match v {
        v if v >= 1e6 => format!("{:.2}M", v / 1e6),
        v if v >= 1e4 => format!("{:.0}k", v / 1e3),
        v if v >= 100.0 => format!("{v:.0}"),
        v if v >= 10.0 => format!("{v:.1}"),
        v => format!("{v:.2}"),
    }
}
