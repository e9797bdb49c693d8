//! PNG pictures with `plotters`' bitmap backend. Text is drawn with `ab_glyph` from a TrueType
//! file read at run time (Debian's fonts-dejavu-core, or `PROOFKIT_FONT`), so no font service is
//! needed and nothing is fetched.

use crate::Error;
use plotters::prelude::*;
use std::path::Path;
use std::sync::OnceLock;

const FONT_CANDIDATES: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/local/share/fonts/DejaVuSans.ttf",
];

/// The font family every plot uses.
pub const FAMILY: &str = "sans-serif";

/// Series colours: the document's figure first, ours second.
pub const DOCUMENT_COLOR: RGBColor = RGBColor(150, 150, 150);
pub const OURS_COLOR: RGBColor = RGBColor(31, 119, 180);
pub const ACCENT_COLOR: RGBColor = RGBColor(214, 39, 40);

/// Registers the font once per process.
pub fn ensure_font() -> Result<(), Error> {
    static FONT: OnceLock<Result<(), String>> = OnceLock::new();
    FONT.get_or_init(|| {
        let env = std::env::var("PROOFKIT_FONT").ok();
        let paths: Vec<&str> = env
            .as_deref()
            .into_iter()
            .chain(FONT_CANDIDATES.iter().copied())
            .collect();
        for p in &paths {
            if let Ok(bytes) = std::fs::read(p) {
                // plotters keeps registered fonts for the life of the process.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                return plotters::style::register_font(FAMILY, FontStyle::Normal, bytes)
                    .map_err(|_| format!("{p} is not a TrueType font"));
            }
        }
        Err(format!("none of {paths:?} exists"))
    })
    .clone()
    .map_err(Error::Font)
}

/// Re-encodes a PNG that plotters wrote (8-bit RGB) as an indexed-colour PNG at the best
/// compression when it has at most 256 colours, which our flat fills, grid lines and text
/// usually do: several times smaller files for the README. Otherwise the file stays as it is.
pub fn compact(path: &Path) -> Result<(), Error> {
    let file = std::io::BufReader::new(std::fs::File::open(path)?);
    let mut reader = png::Decoder::new(file).read_info().map_err(err)?;
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).map_err(err)?;
    if info.color_type != png::ColorType::Rgb || info.bit_depth != png::BitDepth::Eight {
        return Ok(());
    }
    let mut palette: Vec<u8> = Vec::new();
    let mut index = std::collections::HashMap::new();
    let mut pixels = Vec::with_capacity(info.buffer_size() / 3);
    for px in buf[..info.buffer_size()].chunks_exact(3) {
        let c = [px[0], px[1], px[2]];
        let next = index.len();
        let i = *index.entry(c).or_insert(next);
        if i == 256 {
            return Ok(());
        }
        if i == next {
            palette.extend_from_slice(&c);
        }
        pixels.push(i as u8);
    }
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, info.width, info.height);
        enc.set_color(png::ColorType::Indexed);
        enc.set_depth(png::BitDepth::Eight);
        enc.set_palette(palette);
        enc.set_compression(png::Compression::Best);
        let mut w = enc.write_header().map_err(err)?;
        w.write_image_data(&pixels).map_err(err)?;
    }
    std::fs::write(path, out)?;
    Ok(())
}

pub(crate) fn err<E: std::fmt::Display>(e: E) -> Error {
    Error::Plot(e.to_string())
}

/// A histogram bin: `[left, right)` and its height.
#[derive(Clone, Copy, Debug)]
pub struct Bin {
    pub left: f64,
    pub right: f64,
    pub height: f64,
}

/// Equal-width bins of `values` over `[lo, hi)` (values outside are clamped into the end bins).
pub fn bins(values: &[f64], lo: f64, hi: f64, count: usize) -> Vec<Bin> {
    let width = (hi - lo) / count as f64;
    let mut h = vec![0.0; count];
    for &v in values {
        let i = (((v - lo) / width).floor().max(0.0) as usize).min(count - 1);
        h[i] += 1.0;
    }
    h.into_iter()
        .enumerate()
        .map(|(i, height)| Bin {
            left: lo + width * i as f64,
            right: lo + width * (i + 1) as f64,
            height,
        })
        .collect()
}

/// A line drawn over a chart.
pub struct Line<'a> {
    pub label: &'a str,
    pub points: Vec<(f64, f64)>,
    pub color: RGBColor,
}

fn range_of(values: impl Iterator<Item = f64>, pad_zero: bool) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if pad_zero {
        lo = lo.min(0.0);
    }
    if hi <= lo {
        hi = lo + 1.0;
    }
    (lo, hi + (hi - lo) * 0.08)
}

/// A histogram with optional lines over it (e.g. a fitted density scaled to counts).
pub fn histogram(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    bins: &[Bin],
    lines: &[Line<'_>],
) -> Result<(), Error> {
    ensure_font()?;
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    histogram_on(&root, title, x_label, y_label, bins, lines)?;
    root.present().map_err(err)?;
    compact(path)
}

/// [`histogram`] on part of a picture.
pub fn histogram_on<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    x_label: &str,
    y_label: &str,
    bins: &[Bin],
    lines: &[Line<'_>],
) -> Result<(), Error>
where
    DB::ErrorType: 'static,
{
    let x0 = bins.first().map_or(0.0, |b| b.left);
    let x1 = bins.last().map_or(1.0, |b| b.right);
    let (_, y1) = range_of(
        bins.iter()
            .map(|b| b.height)
            .chain(lines.iter().flat_map(|l| l.points.iter().map(|p| p.1))),
        true,
    );
    let mut chart = ChartBuilder::on(area)
        .caption(title, (FAMILY, 22))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1, 0.0..y1)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .x_label_formatter(&|v| crate::fmt_num(*v))
        .y_label_formatter(&|v| crate::fmt_num(*v))
        .label_style((FAMILY, 14))
        .axis_desc_style((FAMILY, 16))
        .draw()
        .map_err(err)?;
    chart
        .draw_series(
            bins.iter()
                .map(|b| Rectangle::new([(b.left, 0.0), (b.right, b.height)], OURS_COLOR.filled())),
        )
        .map_err(err)?;
    for l in lines {
        let color = l.color;
        chart
            .draw_series(LineSeries::new(
                l.points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(err)?
            .label(l.label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    if !lines.is_empty() {
        chart
            .configure_series_labels()
            .label_font((FAMILY, 14))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
    }
    Ok(())
}

/// Lines on linear axes.
pub fn lines(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Line<'_>],
) -> Result<(), Error> {
    ensure_font()?;
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (x0, x1) = range_of(
        series.iter().flat_map(|l| l.points.iter().map(|p| p.0)),
        false,
    );
    let (_, y1) = range_of(
        series.iter().flat_map(|l| l.points.iter().map(|p| p.1)),
        true,
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FAMILY, 22))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1, 0.0..y1)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .x_label_formatter(&|v| crate::fmt_num(*v))
        .y_label_formatter(&|v| crate::fmt_num(*v))
        .label_style((FAMILY, 14))
        .axis_desc_style((FAMILY, 16))
        .draw()
        .map_err(err)?;
    for l in series {
        let color = l.color;
        chart
            .draw_series(LineSeries::new(
                l.points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(err)?
            .label(l.label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .label_font((FAMILY, 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    compact(path)
}

/// Grouped bars: for each category, the document's value (grey, where given) and ours (blue).
pub fn document_vs_ours_bars(
    path: &Path,
    title: &str,
    y_label: &str,
    categories: &[(String, Option<f64>, f64)],
) -> Result<(), Error> {
    ensure_font()?;
    let root = BitMapBackend::new(path, (1000, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let n = categories.len();
    let (_, y1) = range_of(
        categories
            .iter()
            .flat_map(|c| c.1.into_iter().chain(std::iter::once(c.2))),
        true,
    );
    let labels: Vec<String> = categories.iter().map(|c| c.0.clone()).collect();
    // Category i is centred on x = i, so the axis ticks at integers carry the labels.
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FAMILY, 22))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5..n as f64 - 0.5, 0.0..y1 * 1.15)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n + 1)
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < labels.len() {
                labels[i as usize].clone()
            } else {
                String::new()
            }
        })
        .y_desc(y_label)
        .y_label_formatter(&|v| crate::fmt_num(*v))
        .label_style((FAMILY, 14))
        .axis_desc_style((FAMILY, 16))
        .draw()
        .map_err(err)?;
    chart
        .draw_series(categories.iter().enumerate().filter_map(|(i, c)| {
            c.1.map(|d| {
                let x = i as f64;
                Rectangle::new([(x - 0.38, 0.0), (x - 0.02, d)], DOCUMENT_COLOR.filled())
            })
        }))
        .map_err(err)?
        .label("document")
        .legend(|(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], DOCUMENT_COLOR.filled()));
    chart
        .draw_series(categories.iter().enumerate().map(|(i, c)| {
            let x = i as f64;
            Rectangle::new([(x + 0.02, 0.0), (x + 0.38, c.2)], OURS_COLOR.filled())
        }))
        .map_err(err)?
        .label("proofkit")
        .legend(|(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], OURS_COLOR.filled()));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font((FAMILY, 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    compact(path)
}

/// A two-colour bitmap (`true` = accent), one pixel per cell, rows of `width` cells, under a
/// title and above a caption line.
pub fn bitmap(
    path: &Path,
    title: &str,
    caption: &str,
    width: usize,
    cells: &[bool],
) -> Result<(), Error> {
    ensure_font()?;
    let height = cells.len().div_ceil(width);
    let (top, bottom, side) = (40u32, 30u32, 10u32);
    let size = (width as u32 + 2 * side, height as u32 + top + bottom);
    let root = BitMapBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    root.draw(&Text::new(title, (side as i32, 8), (FAMILY, 20)))
        .map_err(err)?;
    root.draw(&Text::new(
        caption,
        (side as i32, (top + height as u32 + 6) as i32),
        (FAMILY, 14),
    ))
    .map_err(err)?;
    for (i, &c) in cells.iter().enumerate() {
        if c {
            let (x, y) = ((i % width) as i32, (i / width) as i32);
            root.draw_pixel((x + side as i32, y + top as i32), &ACCENT_COLOR)
                .map_err(err)?;
        }
    }
    root.present().map_err(err)?;
    compact(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_cover_the_range_and_clamp() {
        let b = bins(&[0.0, 0.5, 0.99, 1.0, -3.0, 7.0], 0.0, 1.0, 2);
        assert_eq!(b.len(), 2);
        assert_eq!((b[0].left, b[0].right, b[1].right), (0.0, 0.5, 1.0));
        assert_eq!((b[0].height, b[1].height), (2.0, 4.0));
    }
}
