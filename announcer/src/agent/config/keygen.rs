//! `announcer keygen`: creates the heartbeat-key Secret once, with 32 random bytes, if it does
//! not exist yet.
//!
//! Why: heartbeats are authenticated with a key every agent shares (see
//! [`crate::heartbeat`]), and `kubectl apply -k deploy/` must install without anyone choosing,
//! committing or even seeing that key. The install runs this as a Job under its own
//! ServiceAccount, whose only permission is `create` on Secrets in the agent namespace, so the
//! agents themselves never get write access to Secrets. It never overwrites: an existing Secret
//! (a second install, a rotated key) is left as it is, so the Job can run again at any time.

use std::{path::PathBuf, process::ExitCode};

use k8s_openapi::{
    ByteString, api::core::v1::Secret, apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::{Api, Client, api::PostParams};

/// Bytes of key generated (HMAC-SHA256 wants at least 32).
pub const KEY_BYTES: usize = 32;

/// `announcer keygen`.
#[derive(clap::Args, Clone, Debug)]
pub struct KeygenArgs {
    /// Namespace of the Secret (the agents' namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "announcer-system")]
    pub namespace: String,
    /// Name of the Secret (the agents' `--heartbeat-secret`).
    #[arg(long, default_value = "announcer-heartbeat-key")]
    pub secret: String,
    /// kubeconfig to use (default: in-cluster config, else $KUBECONFIG / ~/.kube/config).
    #[arg(long, env = "ANNOUNCER_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
}

/// What [`ensure_key`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The Secret was created with a fresh key.
    Created,
    /// A Secret of that name already existed; it was not touched.
    Exists,
}

/// Why no key could be ensured.
#[derive(Debug, thiserror::Error)]
pub enum KeygenError {
    /// No usable kubeconfig / in-cluster configuration.
    #[error("no Kubernetes configuration: {0}")]
    KubeConfig(String),
    /// The API server refused or failed.
    #[error("cannot create Secret {namespace}/{name}: {error}")]
    Create {
        /// Namespace.
        namespace: String,
        /// Secret name.
        name: String,
        /// Why.
        error: kube::Error,
    },
}

/// The Secret [`ensure_key`] creates: `key` holds [`KEY_BYTES`] random bytes.
pub fn new_secret(namespace: &str, name: &str) -> Secret {
    let mut key = [0u8; KEY_BYTES];
    rand::fill(&mut key);
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some([("app.kubernetes.io/name".to_owned(), "announcer".to_owned())].into()),
            ..Default::default()
        },
        type_: Some("Opaque".to_owned()),
        data: Some([("key".to_owned(), ByteString(key.to_vec()))].into()),
        ..Default::default()
    }
}

/// Creates the Secret unless it exists. Only `create` is needed: an existing Secret answers
/// 409, which is success here.
pub async fn ensure_key(
    client: Client,
    namespace: &str,
    name: &str,
) -> Result<Outcome, KeygenError> {
    let api = Api::<Secret>::namespaced(client, namespace);
    match api
        .create(&PostParams::default(), &new_secret(namespace, name))
        .await
    {
        Ok(_) => Ok(Outcome::Created),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(Outcome::Exists),
        Err(error) => Err(KeygenError::Create {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            error,
        }),
    }
}

async fn client(args: &KeygenArgs) -> Result<Client, KeygenError> {
    crate::agent::kube_client(args.kubeconfig.as_deref())
        .await
        .map_err(KeygenError::KubeConfig)
}

/// Runs `announcer keygen` to completion: prints what it did, exits 0, 78 (no configuration)
/// or 69 (the API server refused).
pub fn main(args: KeygenArgs) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(71);
        }
    };
    let result = rt.block_on(async {
        let client = client(&args).await?;
        ensure_key(client, &args.namespace, &args.secret).await
    });
    let (ns, name) = (&args.namespace, &args.secret);
    match result {
        Ok(Outcome::Created) => {
            println!("created Secret {ns}/{name} with a new {KEY_BYTES}-byte heartbeat key");
            ExitCode::SUCCESS
        }
        Ok(Outcome::Exists) => {
            println!("Secret {ns}/{name} exists; left as it is");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(match e {
                KeygenError::KubeConfig(_) => 78,
                KeygenError::Create { .. } => 69,
            })
        }
    }
}
