//! The multimodal opt-in over HTTP: with a per-item bound configured, media
//! parts are admitted and each counts as its bound on top of the exact text
//! count; without it they are refused as unmeasurable.

use crate::common;

use serde_json::{json, Value};

use common::{start, words, Guarded, MediaBounds, Options, MODEL};

const LIMIT: usize = 20;
/// The configured upper bound per image.
const IMAGE: usize = 3;
/// The demo ChatML template around one user message adds 5 tokens.
const CHAT_OVERHEAD: usize = 5;

async fn guard(media: MediaBounds) -> Guarded {
    start(Options {
        limit: LIMIT,
        media,
        ..Options::default()
    })
    .await
}

fn images_only() -> MediaBounds {
    MediaBounds {
        image: Some(IMAGE),
        ..MediaBounds::default()
    }
}

/// A chat whose text (template included) is `text_tokens` tokens, with one image.
fn chat_with_image(text_tokens: usize) -> Value {
    json!({"model": MODEL, "messages": [{"role": "user", "content": [
        {"type": "text", "text": words(text_tokens - CHAT_OVERHEAD)},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
    ]}]})
}

/// Waits on counting: needs the demo tokenizer and template.
#[tokio::test]
async fn chat_image_counts_its_bound_on_top_of_the_text() {
    let g = guard(images_only()).await;
    // L = (LIMIT - 4) + 3 = LIMIT - 1: fits.
    let fits = g
        .post("/v1/chat/completions", &chat_with_image(LIMIT - 4))
        .await;
    assert_eq!(fits.status, 200, "{}", String::from_utf8_lossy(&fits.body));
    assert_eq!(
        g.mock.state.requests()[0].json(),
        chat_with_image(LIMIT - 4)
    );
    // L = (LIMIT - 3) + 3 = LIMIT: refused.
    let over = g
        .post("/v1/chat/completions", &chat_with_image(LIMIT - 3))
        .await;
    assert_eq!(over.status, 400, "{}", String::from_utf8_lossy(&over.body));
    assert_eq!(over.error_code(), "context_length_exceeded");
    // `/invocations` is the same chat handler.
    let over = g.post("/invocations", &chat_with_image(LIMIT - 3)).await;
    assert_eq!(over.status, 400, "{}", String::from_utf8_lossy(&over.body));
    // A kind without a bound is still refused.
    let video = json!({"model": MODEL, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "x"},
        {"type": "video_url", "video_url": {"url": "https://example.com/a.mp4"}},
    ]}]});
    let refused = g.post("/v1/chat/completions", &video).await;
    assert_eq!(refused.status, 400);
    assert_eq!(refused.error_code(), "unmeasurable_content");
    assert_eq!(g.mock.state.count(), 1);
}

/// Waits on counting: needs the demo tokenizer (one token per word).
#[tokio::test]
async fn generate_image_data_counts_each_item() {
    let g = guard(images_only()).await;
    let gen = |n: usize, images: Value| json!({"text": words(n), "image_data": images});
    // 16 + 3 = 19 < 20; 13 + 2 * 3 = 19; nulls are no items.
    for body in [
        gen(LIMIT - 1 - IMAGE, json!("a.png")),
        gen(LIMIT - 1 - 2 * IMAGE, json!(["a.png", null, "b.png"])),
    ] {
        let a = g.post("/generate", &body).await;
        assert_eq!(a.status, 200, "{}", String::from_utf8_lossy(&a.body));
    }
    for body in [
        gen(LIMIT - IMAGE, json!("a.png")),
        gen(LIMIT - 2 * IMAGE, json!([["a.png"], ["b.png"]])),
    ] {
        let a = g.post("/generate", &body).await;
        assert_eq!(a.status, 400, "{}", String::from_utf8_lossy(&a.body));
    }
    let audio = json!({"text": "x", "audio_data": "a.wav"});
    let a = g.post("/generate", &audio).await;
    assert_eq!(a.status, 400, "{}", String::from_utf8_lossy(&a.body));
    assert!(String::from_utf8_lossy(&a.body).contains("audio_data"));
    assert_eq!(g.mock.state.count(), 2);
}

/// Without the opt-in, media are refused as unmeasurable, however short the text.
#[tokio::test]
async fn without_the_opt_in_media_are_refused() {
    let g = guard(MediaBounds::default()).await;
    let a = g
        .post("/v1/chat/completions", &chat_with_image(CHAT_OVERHEAD + 1))
        .await;
    assert_eq!(a.status, 400, "{}", String::from_utf8_lossy(&a.body));
    assert_eq!(a.error_code(), "unmeasurable_content");
    let a = g
        .post("/generate", &json!({"text": "x", "image_data": "a.png"}))
        .await;
    assert_eq!(a.status, 400, "{}", String::from_utf8_lossy(&a.body));
    assert!(String::from_utf8_lossy(&a.body).contains("image_data"));
    assert_eq!(g.mock.state.count(), 0);
}
