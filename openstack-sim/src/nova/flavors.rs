//! Nova's flavors (`GET /flavors`, `/flavors/detail`, `/flavors/{id}`)
//! and its image proxy (`GET /images`, `/images/detail`, `/images/{id}`),
//! which Nova removed at microversion 2.36 (404 from there on).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Extension, Path, State};
use axum::http::Response;
use serde_json::{Value, json};

use super::{NovaCtx, error, iso_z};
use crate::envelope::json_response;
use crate::server::Shared;
use crate::world::model::{Flavor, Image};

/// The last microversion with the image proxy.
const LAST_IMAGE_PROXY_MINOR: u32 = 35;

fn links(ctx: &NovaCtx, kind: &str, id: &str) -> Value {
    json!([
        {"rel": "self", "href": format!("{}/{kind}/{id}", ctx.endpoint)},
        {"rel": "bookmark", "href": format!("{}/{kind}/{id}", ctx.bookmark)},
    ])
}

fn flavor_summary(ctx: &NovaCtx, f: &Flavor) -> Value {
    let mut view = json!({"id": f.id, "name": f.name, "links": links(ctx, "flavors", &f.id)});
    if ctx.at_least(55) {
        view["description"] = Value::Null;
    }
    view
}

/// A flavor in full at this microversion (`swap` is `""` for none before
/// 2.75, `0` from it; `extra_specs` from 2.61).
fn flavor_detail(ctx: &NovaCtx, f: &Flavor) -> Value {
    let mut view = flavor_summary(ctx, f);
    view["ram"] = json!(f.ram_mb);
    view["vcpus"] = json!(f.vcpus);
    view["disk"] = json!(f.disk_gb);
    view["OS-FLV-EXT-DATA:ephemeral"] = json!(0);
    view["OS-FLV-DISABLED:disabled"] = json!(false);
    view["os-flavor-access:is_public"] = json!(true);
    view["swap"] = if ctx.at_least(75) {
        json!(0)
    } else {
        json!("")
    };
    view["rxtx_factor"] = json!(1.0);
    if ctx.at_least(61) {
        view["extra_specs"] = json!({});
    }
    view
}

pub(crate) async fn list_flavors(
    State(shared): State<Arc<Shared>>,
    Extension(ctx): Extension<NovaCtx>,
) -> Response<Body> {
    let world = shared.world.lock();
    let flavors: Vec<Value> = world
        .flavors
        .iter()
        .map(|f| flavor_summary(&ctx, f))
        .collect();
    json_response(200, &json!({ "flavors": flavors }))
}

pub(crate) async fn list_flavors_detail(
    State(shared): State<Arc<Shared>>,
    Extension(ctx): Extension<NovaCtx>,
) -> Response<Body> {
    let world = shared.world.lock();
    let flavors: Vec<Value> = world
        .flavors
        .iter()
        .map(|f| flavor_detail(&ctx, f))
        .collect();
    json_response(200, &json!({ "flavors": flavors }))
}

pub(crate) async fn show_flavor(
    State(shared): State<Arc<Shared>>,
    Extension(ctx): Extension<NovaCtx>,
    Path(flavor_id): Path<String>,
) -> Response<Body> {
    let world = shared.world.lock();
    match world.flavor(&flavor_id) {
        Some(f) => json_response(200, &json!({ "flavor": flavor_detail(&ctx, f) })),
        None => error(404, &format!("Flavor {flavor_id} could not be found.")),
    }
}

fn image_detail(ctx: &NovaCtx, image: &Image) -> Value {
    json!({
        "id": image.id,
        "name": image.name,
        "status": "ACTIVE",
        "progress": 100,
        "minDisk": image.min_disk_gb,
        "minRam": image.min_ram_mb,
        "created": iso_z(&image.created),
        "updated": iso_z(&image.created),
        "metadata": {},
        "OS-EXT-IMG-SIZE:size": image.size,
        "links": links(ctx, "images", &image.id),
    })
}

/// The image proxy's routes answer 404 from 2.36, as Nova's do.
fn proxy_removed(ctx: &NovaCtx) -> Option<Response<Body>> {
    ctx.at_least(LAST_IMAGE_PROXY_MINOR + 1)
        .then(|| error(404, "The resource could not be found."))
}

pub(crate) async fn list_images(
    State(shared): State<Arc<Shared>>,
    Extension(ctx): Extension<NovaCtx>,
) -> Response<Body> {
    if let Some(removed) = proxy_removed(&ctx) {
        return removed;
    }
    let world = shared.world.lock();
    let images: Vec<Value> = world
        .images
        .iter()
        .map(|i| json!({"id": i.id, "name": i.name, "links": links(&ctx, "images", &i.id)}))
        .collect();
    json_response(200, &json!({ "images": images }))
}

pub(crate) async fn list_images_detail(
    State(shared): State<Arc<Shared>>,
    Extension(ctx): Extension<NovaCtx>,
) -> Response<Body> {
    if let Some(removed) = proxy_removed(&ctx) {
        return removed;
    }
    let world = shared.world.lock();
    let images: Vec<Value> = world.images.iter().map(|i| image_detail(&ctx, i)).collect();
    json_response(200, &json!({ "images": images }))
}

pub(crate) async fn show_image(
    State(shared): State<Arc<Shared>>,
    Extension(ctx): Extension<NovaCtx>,
    Path(image_id): Path<String>,
) -> Response<Body> {
    if let Some(removed) = proxy_removed(&ctx) {
        return removed;
    }
    let world = shared.world.lock();
    match world.image(&image_id) {
        Some(i) => json_response(200, &json!({ "image": image_detail(&ctx, i) })),
        None => error(404, "Image not found."),
    }
}
