//! Lookups by field over a reflector store. A [`Store`] answers by name; the API asks by namespace, by app, by
//! channel and by uid, and answering those by scanning every cached object makes each request cost the size of the
//! whole cluster. An [`Indexed`] store files every object under the keys its kind is looked up by, so a lookup costs
//! its answer.
//!
//! The index follows the same watch events as the store and is updated just before it: between the two a lookup
//! may name an object the store does not hold yet (it is left out, as if the event had not arrived) or miss one
//! just deleted, never answer an object the store has dropped. A relist builds a fresh index and swaps it in at its
//! end, as the store does, so objects deleted while no watch ran leave the index too.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use kube::runtime::reflector::{Lookup, ObjectRef, Store};
use kube::runtime::watcher;

/// The keys an object is filed under.
pub type Keys<K> = fn(&K) -> Vec<String>;

/// A reflector store with an index of its objects by the keys `keys` gives each.
pub struct Indexed<K>
where
    K: Lookup<DynamicType = ()> + Clone + 'static,
{
    store: Store<K>,
    index: Arc<RwLock<Index<K>>>,
}

impl<K> Clone for Indexed<K>
where
    K: Lookup<DynamicType = ()> + Clone + 'static,
{
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            index: self.index.clone(),
        }
    }
}

impl<K> Indexed<K>
where
    K: kube::Resource<DynamicType = ()> + Lookup<DynamicType = ()> + Clone + 'static,
{
    /// An index over `store` filing objects by `keys`, and the [`Indexer`] that keeps it current (feed it the watch
    /// events the store's writer gets, before the writer).
    pub fn new(store: Store<K>, keys: Keys<K>) -> (Self, Indexer<K>) {
        let index = Arc::new(RwLock::new(Index::default()));
        let indexer = Indexer {
            index: index.clone(),
            keys,
            relist: None,
        };
        (Self { store, index }, indexer)
    }

    /// The store itself.
    pub fn store(&self) -> &Store<K> {
        &self.store
    }

    /// The objects filed under `key`.
    pub fn under(&self, key: &str) -> Vec<Arc<K>> {
        let refs: Vec<ObjectRef<K>> = {
            let index = self.index.read().unwrap_or_else(|p| p.into_inner());
            index
                .by_key
                .get(key)
                .map(|refs| refs.iter().cloned().collect())
                .unwrap_or_default()
        };
        refs.iter().filter_map(|r| self.store.get(r)).collect()
    }

    /// The object with `uid`.
    pub fn by_uid(&self, uid: &str) -> Option<Arc<K>> {
        let found = {
            let index = self.index.read().unwrap_or_else(|p| p.into_inner());
            index.by_uid.get(uid).cloned()
        };
        self.store
            .get(&found?)
            .filter(|o| o.meta().uid.as_deref() == Some(uid))
    }
}

/// Keeps an [`Indexed`] store's index current from watch events.
pub struct Indexer<K>
where
    K: Lookup<DynamicType = ()> + Clone + 'static,
{
    index: Arc<RwLock<Index<K>>>,
    keys: Keys<K>,
    /// The index a relist in progress is building.
    relist: Option<Index<K>>,
}

impl<K> Indexer<K>
where
    K: kube::Resource<DynamicType = ()> + Lookup<DynamicType = ()> + Clone + 'static,
{
    /// Files or unfiles what `event` says.
    pub fn apply(&mut self, event: &watcher::Event<K>) {
        match event {
            watcher::Event::Apply(o) => self.write().file(o, (self.keys)(o)),
            watcher::Event::Delete(o) => self.write().unfile(&ObjectRef::from_obj(o)),
            watcher::Event::Init => self.relist = Some(Index::default()),
            watcher::Event::InitApply(o) => {
                let keys = (self.keys)(o);
                self.relist.get_or_insert_with(Index::default).file(o, keys);
            }
            watcher::Event::InitDone => {
                if let Some(fresh) = self.relist.take() {
                    *self.write() = fresh;
                }
            }
        }
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Index<K>> {
        self.index.write().unwrap_or_else(|p| p.into_inner())
    }
}

/// Where each object is filed, and the files.
struct Index<K>
where
    K: Lookup<DynamicType = ()> + Clone + 'static,
{
    by_key: HashMap<String, HashSet<ObjectRef<K>>>,
    by_uid: HashMap<String, ObjectRef<K>>,
    /// Each object's keys and uid, to unfile it by name alone.
    filed: HashMap<ObjectRef<K>, (Vec<String>, Option<String>)>,
}

impl<K> Default for Index<K>
where
    K: Lookup<DynamicType = ()> + Clone + 'static,
{
    fn default() -> Self {
        Self {
            by_key: HashMap::new(),
            by_uid: HashMap::new(),
            filed: HashMap::new(),
        }
    }
}

impl<K> Index<K>
where
    K: kube::Resource<DynamicType = ()> + Lookup<DynamicType = ()> + Clone + 'static,
{
    fn file(&mut self, object: &K, keys: Vec<String>) {
        let at = ObjectRef::from_obj(object);
        let uid = object.meta().uid.clone();
        if self.filed.get(&at) == Some(&(keys.clone(), uid.clone())) {
            return;
        }
        self.unfile(&at);
        for key in &keys {
            self.by_key
                .entry(key.clone())
                .or_default()
                .insert(at.clone());
        }
        if let Some(uid) = &uid {
            self.by_uid.insert(uid.clone(), at.clone());
        }
        self.filed.insert(at, (keys, uid));
    }

    fn unfile(&mut self, at: &ObjectRef<K>) {
        let Some((keys, uid)) = self.filed.remove(at) else {
            return;
        };
        for key in keys {
            if let Some(refs) = self.by_key.get_mut(&key) {
                refs.remove(at);
                if refs.is_empty() {
                    self.by_key.remove(&key);
                }
            }
        }
        if let Some(uid) = uid
            && self.by_uid.get(&uid) == Some(at)
        {
            self.by_uid.remove(&uid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;
    use kube::runtime::reflector::store::Writer;

    fn map(namespace: &str, name: &str, uid: &str, team: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                namespace: Some(namespace.into()),
                name: Some(name.into()),
                uid: Some(uid.into()),
                labels: Some([("team".to_owned(), team.to_owned())].into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    const BY_TEAM: Keys<ConfigMap> = |m| {
        let team = m.metadata.labels.as_ref().and_then(|l| l.get("team"));
        vec![format!("team/{}", team.cloned().unwrap_or_default())]
    };

    /// A store and its index, fed the same events in the order the cache feeds them.
    struct Fed {
        indexed: Indexed<ConfigMap>,
        indexer: Indexer<ConfigMap>,
        writer: Writer<ConfigMap>,
    }

    impl Fed {
        fn new() -> Self {
            let (reader, writer) = kube::runtime::reflector::store();
            let (indexed, indexer) = Indexed::new(reader, BY_TEAM);
            Self {
                indexed,
                indexer,
                writer,
            }
        }

        fn send(&mut self, event: watcher::Event<ConfigMap>) {
            self.indexer.apply(&event);
            self.writer.apply_watcher_event(&event);
        }

        fn names_under(&self, key: &str) -> Vec<String> {
            let mut names: Vec<String> = self
                .indexed
                .under(key)
                .iter()
                .map(|m| m.metadata.name.clone().unwrap_or_default())
                .collect();
            names.sort();
            names
        }
    }

    #[test]
    fn objects_are_found_under_their_keys_and_by_uid_until_deleted() {
        let mut fed = Fed::new();
        fed.send(watcher::Event::Apply(map("a", "one", "u1", "red")));
        fed.send(watcher::Event::Apply(map("b", "two", "u2", "red")));
        fed.send(watcher::Event::Apply(map("a", "three", "u3", "blue")));
        assert_eq!(fed.names_under("team/red"), ["one", "two"]);
        assert_eq!(fed.names_under("team/blue"), ["three"]);
        assert!(fed.names_under("team/green").is_empty());
        assert_eq!(
            fed.indexed
                .by_uid("u3")
                .and_then(|m| m.metadata.name.clone()),
            Some("three".into())
        );

        fed.send(watcher::Event::Delete(map("a", "one", "u1", "red")));
        assert_eq!(fed.names_under("team/red"), ["two"]);
        assert!(fed.indexed.by_uid("u1").is_none());
    }

    #[test]
    fn an_object_whose_keys_change_is_refiled_and_a_recreated_name_answers_only_its_new_uid() {
        let mut fed = Fed::new();
        fed.send(watcher::Event::Apply(map("a", "one", "u1", "red")));
        fed.send(watcher::Event::Apply(map("a", "one", "u1", "blue")));
        assert!(fed.names_under("team/red").is_empty());
        assert_eq!(fed.names_under("team/blue"), ["one"]);

        fed.send(watcher::Event::Delete(map("a", "one", "u1", "blue")));
        fed.send(watcher::Event::Apply(map("a", "one", "u9", "blue")));
        assert!(fed.indexed.by_uid("u1").is_none());
        assert!(fed.indexed.by_uid("u9").is_some());
    }

    #[test]
    fn a_relist_replaces_the_index_at_its_end_and_forgets_what_it_did_not_list() {
        let mut fed = Fed::new();
        fed.send(watcher::Event::Apply(map("a", "one", "u1", "red")));
        fed.send(watcher::Event::Apply(map("a", "two", "u2", "red")));
        fed.send(watcher::Event::Init);
        fed.send(watcher::Event::InitApply(map("a", "two", "u2", "red")));
        // Until the relist ends, the old answers stand.
        assert_eq!(fed.names_under("team/red"), ["one", "two"]);
        fed.send(watcher::Event::InitDone);
        assert_eq!(fed.names_under("team/red"), ["two"]);
        assert!(fed.indexed.by_uid("u1").is_none());
    }

    #[test]
    fn a_uid_filed_for_a_name_the_store_now_holds_under_another_uid_is_not_answered() {
        let mut fed = Fed::new();
        fed.send(watcher::Event::Apply(map("a", "one", "u1", "red")));
        // The store moves on before the index hears of it (the index is told first in the cache, but a reader
        // must not trust the index alone).
        fed.writer
            .apply_watcher_event(&watcher::Event::Apply(map("a", "one", "u2", "red")));
        assert!(fed.indexed.by_uid("u1").is_none());
    }
}
