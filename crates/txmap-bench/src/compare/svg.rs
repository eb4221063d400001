//! Minimal SVG charts for the report: grouped bars and log-scale lines.
//! Hand-written so the report needs no plotting dependency.

use std::fmt::Write;

const W: f64 = 760.0;
const H: f64 = 380.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 190.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
const COLORS: [&str; 10] = [
    "#d62728", "#ff7f0e", "#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn head(title: &str) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">
<rect width="{W}" height="{H}" fill="white"/>
<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>
"#,
        W / 2.0,
        esc(title)
    );
    s
}

fn legend(s: &mut String, names: &[String]) {
    for (i, n) in names.iter().enumerate() {
        let y = TOP + 10.0 + i as f64 * 18.0;
        let x = W - RIGHT + 15.0;
        let _ = writeln!(
            s,
            r#"<rect x="{x}" y="{}" width="12" height="12" fill="{}"/><text x="{}" y="{}">{}</text>"#,
            y - 10.0,
            COLORS[i % COLORS.len()],
            x + 17.0,
            y,
            esc(n)
        );
    }
}

/// A "nice" upper bound for an axis.
fn nice_max(x: f64) -> f64 {
    if x <= 0.0 {
        return 1.0;
    }
    let p = 10f64.powf(x.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * p >= x {
            return m * p;
        }
    }
    10.0 * p
}

fn label(x: f64) -> String {
    crate::report::num(x)
}

/// Bars: one group per category (x), one bar per series; `None` is a gap.
pub fn bars(
    title: &str,
    y_label: &str,
    categories: &[String],
    series: &[(String, Vec<Option<f64>>)],
) -> String {
    let mut s = head(title);
    let max = series
        .iter()
        .flat_map(|(_, v)| v.iter().flatten())
        .fold(0.0f64, |a, &b| a.max(b));
    let top = nice_max(max);
    let pw = W - LEFT - RIGHT;
    let ph = H - TOP - BOTTOM;
    axes(&mut s, y_label, top, false);
    let gw = pw / categories.len().max(1) as f64;
    let bw = (gw * 0.8) / series.len().max(1) as f64;
    for (ci, c) in categories.iter().enumerate() {
        let gx = LEFT + ci as f64 * gw;
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            gx + gw / 2.0,
            H - BOTTOM + 16.0,
            esc(c)
        );
        for (si, (_, vals)) in series.iter().enumerate() {
            if let Some(Some(v)) = vals.get(ci) {
                let h = ph * v / top;
                let _ = writeln!(
                    s,
                    r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{}: {}</title></rect>"#,
                    gx + gw * 0.1 + si as f64 * bw,
                    TOP + ph - h,
                    bw.max(1.0),
                    h,
                    COLORS[si % COLORS.len()],
                    esc(&series[si].0),
                    label(*v)
                );
            }
        }
    }
    let names: Vec<String> = series.iter().map(|(n, _)| n.clone()).collect();
    legend(&mut s, &names);
    s.push_str("</svg>\n");
    s
}

fn axes(s: &mut String, y_label: &str, top: f64, log: bool) {
    let ph = H - TOP - BOTTOM;
    let _ = writeln!(
        s,
        r#"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{}" stroke="black"/><line x1="{LEFT}" y1="{}" x2="{}" y2="{}" stroke="black"/>"#,
        TOP + ph,
        TOP + ph,
        W - RIGHT,
        TOP + ph
    );
    let _ = writeln!(
        s,
        r#"<text x="16" y="{}" transform="rotate(-90 16 {})" text-anchor="middle">{}</text>"#,
        TOP + ph / 2.0,
        TOP + ph / 2.0,
        esc(y_label)
    );
    if log {
        return;
    }
    for i in 0..=5 {
        let v = top * i as f64 / 5.0;
        let y = TOP + ph - ph * i as f64 / 5.0;
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            W - RIGHT,
            LEFT - 4.0,
            y + 4.0,
            label(v)
        );
    }
}

/// Lines on log-log axes: each series is (name, points (x, y)).
pub fn loglog(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> String {
    let mut s = head(title);
    let pts = || {
        series
            .iter()
            .flat_map(|(_, p)| p.iter())
            .filter(|p| p.0 > 0.0 && p.1 > 0.0)
    };
    let (x0, x1) = pts().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let (y0, y1) = pts().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.1), b.max(p.1)));
    if x0 > x1 || y0 > y1 {
        s.push_str("</svg>\n");
        return s;
    }
    let (lx0, lx1) = (
        x0.log10().floor(),
        x1.log10().ceil().max(x0.log10().floor() + 1.0),
    );
    let (ly0, ly1) = (
        y0.log10().floor(),
        y1.log10().ceil().max(y0.log10().floor() + 1.0),
    );
    let pw = W - LEFT - RIGHT;
    let ph = H - TOP - BOTTOM;
    let px = |x: f64| LEFT + pw * (x.log10() - lx0) / (lx1 - lx0);
    let py = |y: f64| TOP + ph - ph * (y.log10() - ly0) / (ly1 - ly0);
    axes(&mut s, y_label, 0.0, true);
    for e in lx0 as i32..=lx1 as i32 {
        let x = px(10f64.powi(e));
        let _ = writeln!(
            s,
            r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{}" stroke="#ddd"/><text x="{x:.1}" y="{}" text-anchor="middle">{}</text>"##,
            TOP + ph,
            TOP + ph + 16.0,
            label(10f64.powi(e))
        );
    }
    for e in ly0 as i32..=ly1 as i32 {
        let y = py(10f64.powi(e));
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            W - RIGHT,
            LEFT - 4.0,
            y + 4.0,
            label(10f64.powi(e))
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        LEFT + pw / 2.0,
        H - 12.0,
        esc(x_label)
    );
    for (i, (_, p)) in series.iter().enumerate() {
        let path: Vec<String> = p
            .iter()
            .filter(|p| p.0 > 0.0 && p.1 > 0.0)
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        if !path.is_empty() {
            let _ = writeln!(
                s,
                r#"<polyline fill="none" stroke="{}" stroke-width="2" points="{}"/>"#,
                COLORS[i % COLORS.len()],
                path.join(" ")
            );
        }
    }
    let names: Vec<String> = series.iter().map(|(n, _)| n.clone()).collect();
    legend(&mut s, &names);
    s.push_str("</svg>\n");
    s
}
