SELECT id FROM topics WHERE status = 'deleting' ORDER BY created_at, id
